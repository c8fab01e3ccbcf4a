//! Configuration errors: every problem found, each with the path where it is.

use std::fmt;

/// One problem in the configuration: where it is and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The dotted path of the offending key, e.g. `exporters.otlp/tempo.endpoint`; for a
    /// file that cannot be read or parsed, the file name.
    pub path: String,
    /// What is wrong and, where the cause is a user mistake, how to fix it.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The configuration could not be loaded.
///
/// Holds *all* problems found, not only the first, so that one run shows everything to
/// fix. Displays as one `path: message` line per problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", ProblemLines(&self.problems))]
pub struct ConfigError {
    problems: Vec<Problem>,
}

impl ConfigError {
    /// The problems, in the order they were found (files first, then sections in
    /// document order: receivers, processors, exporters, connectors, extensions, service).
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    pub(crate) fn new(problems: Vec<Problem>) -> Self {
        Self { problems }
    }
}

struct ProblemLines<'a>(&'a [Problem]);

impl fmt::Display for ProblemLines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

/// Collects problems while the configuration is walked.
#[derive(Debug, Default)]
pub(crate) struct Problems {
    list: Vec<Problem>,
}

impl Problems {
    /// Records a problem at `path`.
    pub(crate) fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.list.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Whether nothing has been recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// `Ok(value)` when nothing was recorded, else every problem.
    pub(crate) fn finish<T>(self, value: T) -> Result<T, ConfigError> {
        if self.list.is_empty() {
            Ok(value)
        } else {
            Err(ConfigError::new(self.list))
        }
    }

    /// Every problem recorded, as an error.
    pub(crate) fn into_error(self) -> ConfigError {
        ConfigError::new(self.list)
    }
}

/// Joins a parent path and a key: `join("a.b", "c")` is `a.b.c`.
pub(crate) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}
