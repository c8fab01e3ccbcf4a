//! Authentication: the server authenticator extensions (`bearertokenauth`, `basicauth`)
//! and the OTLP receivers' `auth.authenticator` that names one, with the Collector's keys.
//!
//! Credentials are read into [`Secret`]s and no message here quotes one: a value of the
//! wrong type is described by its type only.

use std::path::PathBuf;

use super::common::Reader;
use super::error::{Problems, join};
use super::fields::{Fields, NOT_YET};
use super::htpasswd::Htpasswd;
use super::ids::{self, Section};
use super::value::Value;
use super::{
    BasicAuthConfig, BearerTokenAuthConfig, BearerTokens, ComponentId, Config, ExtensionConfig,
    ReceiverConfig, Secret,
};

/// The default `scheme` of `bearertokenauth`, as in the Collector.
const DEFAULT_SCHEME: &str = "Bearer";

/// The default `header` of `bearertokenauth`, as in the Collector.
const DEFAULT_HEADER: &str = "Authorization";

/// `extensions.bearertokenauth`.
pub(crate) const BEARER_TOKEN_AUTH: Reader<ExtensionConfig> = Reader {
    known: &["scheme", "header", "token", "tokens", "filename"],
    unsupported: &[],
    typed: |problems, fields| ExtensionConfig::BearerTokenAuth(bearer_token_auth(problems, fields)),
};

/// `extensions.basicauth`. `client_auth` is the exporter side, which tailgate's exporters do
/// not take yet.
pub(crate) const BASIC_AUTH: Reader<ExtensionConfig> = Reader {
    known: &["htpasswd"],
    unsupported: &[("client_auth", NOT_YET)],
    typed: |problems, fields| ExtensionConfig::BasicAuth(basic_auth(problems, fields)),
};

/// A secret string at `key`: a string (or an integer, as its digits). Any other value is
/// described by its type alone, so that the message carries no part of it.
fn secret(problems: &mut Problems, path: &str, value: &Value) -> Option<Secret> {
    match value {
        Value::Str(text) | Value::Env(text) => Some(Secret::new(text.clone())),
        Value::Int(number) => Some(Secret::new(number.to_string())),
        _ => {
            problems.add(
                path,
                "expected a string (the value is not shown: it is secret)",
            );
            None
        }
    }
}

fn bearer_token_auth(problems: &mut Problems, bearer: &Fields<'_>) -> BearerTokenAuthConfig {
    let scheme = bearer
        .string(problems, "scheme")
        .unwrap_or_else(|| DEFAULT_SCHEME.to_owned());
    if scheme.contains(char::is_whitespace) {
        problems.add(
            bearer.key_path("scheme"),
            format!("{scheme:?} must be one word, e.g. \"Bearer\" (or empty for the token alone)"),
        );
    }
    let header = bearer
        .string(problems, "header")
        .unwrap_or_else(|| DEFAULT_HEADER.to_owned());
    if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
        problems.add(
            bearer.key_path("header"),
            format!("{header:?} is not a valid header name, e.g. \"Authorization\""),
        );
    }
    let token = bearer
        .value("token")
        .and_then(|value| secret(problems, &bearer.key_path("token"), value));
    let tokens = bearer.value("tokens").and_then(|value| {
        let path = bearer.key_path("tokens");
        let Value::Seq(items) = value else {
            problems.add(
                &path,
                format!("expected a list, found {}", value.describe()),
            );
            return None;
        };
        let read: Vec<Option<Secret>> = items
            .iter()
            .enumerate()
            .map(|(i, item)| secret(problems, &format!("{path}[{i}]"), item))
            .collect();
        read.into_iter().collect::<Option<Vec<_>>>()
    });
    let filename = bearer
        .string(problems, "filename")
        .filter(|f| !f.is_empty());
    let empty = |secret: &Secret| secret.expose().trim().is_empty();
    if let Some(tokens) = &tokens
        && filename.is_none()
        && tokens.iter().any(empty)
    {
        problems.add(
            bearer.key_path("tokens"),
            "every token must be non-empty (an unset environment variable becomes empty)",
        );
    }
    if token.is_some() && tokens.is_some() {
        problems.add(bearer.path(), "set one of token and tokens, not both");
    }
    let tokens = match (filename, tokens, token) {
        (Some(filename), _, _) => BearerTokens::File(PathBuf::from(filename)),
        (None, Some(tokens), _) if !tokens.is_empty() => BearerTokens::Inline(tokens),
        (None, _, Some(token)) if !empty(&token) => BearerTokens::Inline(vec![token]),
        (None, _, token) => {
            if !bearer.wrong_type() {
                let what = if token.is_some() {
                    "token is empty (an unset environment variable becomes empty)"
                } else {
                    "no token"
                };
                problems.add(
                    bearer.path(),
                    format!(
                        "{what}: set token, tokens, or filename (a file holding the token, \
                         e.g. a mounted Secret)"
                    ),
                );
            }
            BearerTokens::Inline(Vec::new())
        }
    };
    BearerTokenAuthConfig {
        scheme,
        header,
        tokens,
    }
}

fn basic_auth(problems: &mut Problems, basic: &Fields<'_>) -> BasicAuthConfig {
    let htpasswd = basic.child(problems, "htpasswd", &["file", "inline"], &[]);
    let file = htpasswd
        .string(problems, "file")
        .filter(|f| !f.is_empty())
        .map(PathBuf::from);
    let inline = htpasswd
        .value("inline")
        .and_then(|value| secret(problems, &htpasswd.key_path("inline"), value))
        .filter(|inline| !inline.expose().trim().is_empty());
    let mut users = Htpasswd::default();
    if let Some(file) = &file {
        let path = htpasswd.key_path("file");
        match std::fs::read_to_string(file) {
            Ok(text) => {
                if let Err(error) = users.add(&text) {
                    problems.add(path, format!("{}: {error}", file.display()));
                }
            }
            Err(error) => problems.add(
                path,
                format!(
                    "{} cannot be read: {error}; name an htpasswd file (htpasswd -cB FILE USER)",
                    file.display()
                ),
            ),
        }
    }
    if let Some(inline) = &inline
        && let Err(error) = users.add(inline.expose())
    {
        problems.add(htpasswd.key_path("inline"), error.to_string());
    }
    if file.is_none() && inline.is_none() && !basic.wrong_type() && !htpasswd.wrong_type() {
        problems.add(
            htpasswd.path(),
            "set htpasswd.file or htpasswd.inline: the users a server takes",
        );
    }
    BasicAuthConfig {
        file,
        inline,
        users,
    }
}

/// `protocols.{grpc,http}.auth`: the authenticator's id.
pub(crate) fn server_auth(problems: &mut Problems, server: &Fields<'_>) -> Option<ComponentId> {
    server.value("auth")?;
    let auth = server.child(problems, "auth", &["authenticator"], &[]);
    let path = auth.key_path("authenticator");
    let Some(written) = auth.string(problems, "authenticator") else {
        if !auth.wrong_type() && auth.value("authenticator").is_none() {
            problems.add(
                path,
                "must name an authenticator extension, e.g. bearertokenauth",
            );
        }
        return None;
    };
    match ids::component_id(Section::Extensions, &written) {
        Ok(id) => Some(id),
        Err(message) => {
            problems.add(path, message);
            None
        }
    }
}

/// Every receiver's `auth.authenticator` names an extension that is defined, is an
/// authenticator, and is listed in `service.extensions` (so that it starts), as the
/// Collector requires.
pub(crate) fn check_references(problems: &mut Problems, config: &Config) {
    for (id, receiver) in &config.receivers {
        let ReceiverConfig::Otlp(otlp) = receiver;
        let servers = [
            (
                "grpc",
                otlp.grpc.as_ref().and_then(|grpc| grpc.auth.as_ref()),
            ),
            (
                "http",
                otlp.http.as_ref().and_then(|http| http.auth.as_ref()),
            ),
        ];
        for (protocol, authenticator) in servers {
            let Some(authenticator) = authenticator else {
                continue;
            };
            let path = join(
                &format!("receivers.{}.protocols.{protocol}.auth", id.written),
                "authenticator",
            );
            let written = &authenticator.written;
            let same = |other: &ComponentId| {
                other.kind == authenticator.kind && other.name == authenticator.name
            };
            let defined = config
                .extensions
                .iter()
                .find_map(|(extension, settings)| same(extension).then_some(settings));
            match defined {
                None => problems.add(
                    path,
                    format!(
                        "{written:?} is not defined under extensions: add it, e.g. \
                         extensions.bearertokenauth.filename"
                    ),
                ),
                Some(ExtensionConfig::BearerTokenAuth(_) | ExtensionConfig::BasicAuth(_)) => {
                    if !config.service.extensions.iter().any(same) {
                        problems.add(
                            path,
                            format!(
                                "{written:?} is not listed in service.extensions: add it there \
                                 so it starts"
                            ),
                        );
                    }
                }
                Some(_) => problems.add(
                    path,
                    format!(
                        "{written:?} is a {} extension, not an authenticator: name a \
                         bearertokenauth or basicauth extension",
                        authenticator.kind
                    ),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::no_env;
    use super::super::{load_str_with_env, render};
    use super::*;

    const RECEIVER: &str = "
receivers:
  otlp:
    protocols:
      grpc:
        auth:
          authenticator: bearertokenauth
      http:
        auth:
          authenticator: basicauth/users
exporters:
  debug:
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [debug]
";

    fn problems(docs: &[&str]) -> Vec<String> {
        match load_str_with_env(docs, &no_env) {
            Ok(_) => Vec::new(),
            Err(error) => error
                .problems()
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect(),
        }
    }

    /// Scenario: both receivers name an authenticator: a bearertokenauth with a token and
    /// defaults, a basicauth with inline htpasswd text; then `print-config`'s rendering.
    /// Guarantees: the ids and settings are typed with the Collector's defaults (scheme
    /// `Bearer`, header `Authorization`); the rendering shows every key but writes the token
    /// and the inline text as `[REDACTED]`, and reads back.
    #[test]
    fn authenticators_load_and_render_redacted() {
        let extensions = "
extensions:
  bearertokenauth:
    token: s3cr3t-token
  basicauth/users:
    htpasswd:
      inline: |
        alice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=
service:
  extensions: [bearertokenauth, basicauth/users]
";
        let config = load_str_with_env(&[RECEIVER, extensions], &no_env).expect("loads");
        let ReceiverConfig::Otlp(otlp) = &config.receivers[&ComponentId::literal("otlp")];
        let grpc_auth = otlp.grpc.as_ref().and_then(|grpc| grpc.auth.clone());
        assert_eq!(grpc_auth, Some(ComponentId::literal("bearertokenauth")));
        let http_auth = otlp.http.as_ref().and_then(|http| http.auth.clone());
        assert_eq!(http_auth, Some(ComponentId::literal("basicauth/users")));
        let ExtensionConfig::BearerTokenAuth(bearer) =
            &config.extensions[&ComponentId::literal("bearertokenauth")]
        else {
            panic!("bearer");
        };
        assert_eq!(bearer.scheme, "Bearer");
        assert_eq!(bearer.header, "Authorization");
        assert_eq!(
            bearer.tokens,
            BearerTokens::Inline(vec![Secret::new("s3cr3t-token".into())])
        );
        let ExtensionConfig::BasicAuth(basic) =
            &config.extensions[&ComponentId::literal("basicauth/users")]
        else {
            panic!("basic");
        };
        assert_eq!(basic.users.len(), 1);
        assert!(basic.users.get("alice").is_some());

        let rendered = render(&config);
        assert!(!rendered.contains("s3cr3t"), "{rendered}");
        assert!(!rendered.contains("W6ph5"), "{rendered}");
        assert!(!format!("{config:?}").contains("s3cr3t"));
        assert!(
            rendered.contains("authenticator: \"bearertokenauth\""),
            "{rendered}"
        );
        assert!(rendered.contains("tokens: [\"[REDACTED]\"]"), "{rendered}");
        assert!(rendered.contains("inline: \"[REDACTED]\""), "{rendered}");
        assert!(rendered.contains("scheme: \"Bearer\""), "{rendered}");
        // The redacted text reads back (as the literal token "[REDACTED]"; the inline
        // text then is no valid htpasswd line and is refused, by line, not quoted).
        let again = problems(&[&rendered]);
        assert_eq!(
            again,
            [
                "extensions.basicauth/users.htpasswd.inline: line 1: expected user:hash (as written by htpasswd -B)"
            ]
        );
    }

    /// Scenario: receivers naming an authenticator that is not defined, one defined but not
    /// in `service.extensions`, and an extension that is no authenticator.
    /// Guarantees: each is refused at `...auth.authenticator` with what to do, as the
    /// Collector refuses them.
    #[test]
    fn authenticator_references_are_checked() {
        assert_eq!(
            problems(&[RECEIVER]),
            [
                "receivers.otlp.protocols.grpc.auth.authenticator: \"bearertokenauth\" is not defined under extensions: add it, e.g. extensions.bearertokenauth.filename",
                "receivers.otlp.protocols.http.auth.authenticator: \"basicauth/users\" is not defined under extensions: add it, e.g. extensions.bearertokenauth.filename",
            ]
        );
        let unlisted = "
extensions:
  bearertokenauth:
    filename: /run/secrets/token
  basicauth/users:
    htpasswd:
      inline: \"alice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\"
service:
  extensions: [basicauth/users]
";
        assert_eq!(
            problems(&[RECEIVER, unlisted]),
            [
                "receivers.otlp.protocols.grpc.auth.authenticator: \"bearertokenauth\" is not listed in service.extensions: add it there so it starts"
            ]
        );
        let wrong_kind = "
receivers:
  otlp:
    protocols:
      http:
        auth:
          authenticator: health_check
extensions:
  health_check:
service:
  extensions: [health_check]
";
        assert_eq!(
            problems(&[RECEIVER, wrong_kind]),
            [
                "receivers.otlp.protocols.grpc.auth.authenticator: \"bearertokenauth\" is not defined under extensions: add it, e.g. extensions.bearertokenauth.filename",
                "receivers.otlp.protocols.http.auth.authenticator: \"health_check\" is a health_check extension, not an authenticator: name a bearertokenauth or basicauth extension",
            ]
        );
    }

    /// Scenario: bearertokenauth with no token, an empty token (an unset variable), both
    /// token and tokens, a token of the wrong type, a scheme of two words; basicauth with
    /// no htpasswd, a missing file, and an inline line of an unsupported kind.
    /// Guarantees: each is refused at its path with a fix, and no message quotes a secret.
    #[test]
    fn authenticator_settings_are_checked_without_quoting_secrets() {
        let yaml = "
extensions:
  bearertokenauth/none: {}
  bearertokenauth/empty:
    token: ${env:UNSET_TOKEN}
  bearertokenauth/both:
    token: tok-secret-1
    tokens: [tok-secret-2]
  bearertokenauth/typed:
    token: [tok-secret-3]
  bearertokenauth/scheme:
    scheme: My Scheme
    token: tok-secret-4
  basicauth/none: {}
  basicauth/missing:
    htpasswd:
      file: /nonexistent/htpasswd
  basicauth/des:
    htpasswd:
      inline: \"carol:rqXexS6ZhobKA\"
";
        let found = problems(&[super::super::tests::MINIMAL, yaml]);
        let all = found.join("\n");
        for secret in ["tok-secret", "rqXexS6ZhobKA"] {
            assert!(!all.contains(secret), "{all}");
        }
        let expect = [
            "extensions.bearertokenauth/none: no token: set token, tokens, or filename",
            "extensions.bearertokenauth/empty: token is empty",
            "extensions.bearertokenauth/both: set one of token and tokens, not both",
            "extensions.bearertokenauth/typed.token: expected a string (the value is not shown",
            "extensions.bearertokenauth/scheme.scheme: \"My Scheme\" must be one word",
            "extensions.basicauth/none.htpasswd: set htpasswd.file or htpasswd.inline",
            "extensions.basicauth/missing.htpasswd.file: /nonexistent/htpasswd cannot be read",
            "extensions.basicauth/des.htpasswd.inline: line 1: the password of user \"carol\" is a crypt(3) DES hash",
        ];
        for prefix in expect {
            assert!(
                found.iter().any(|problem| problem.starts_with(prefix)),
                "no problem starts with {prefix:?} in:\n{all}"
            );
        }
    }
}
