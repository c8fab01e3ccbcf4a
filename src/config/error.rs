//! Configuration errors: every problem found, each with the path where it is.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt;
use std::rc::Rc;

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

/// The message for a key that a section lists as known but whose reader never asked for
/// it: the value would be silently ignored, so the key is refused instead.
pub(crate) const NEVER_READ: &str = "tailgate accepts this key but never reads it (a bug in tailgate): remove it, and please report the bug";

/// Collects problems while the configuration is walked.
#[derive(Debug, Default)]
pub(crate) struct Problems {
    list: Vec<Problem>,
    /// Every mapping opened with a list of known keys, to find keys that were written and
    /// known but never read (see [`KeyReads`]).
    opened: Vec<Rc<KeyReads>>,
}

/// The known keys of one opened mapping, and which of them its reader asked for.
///
/// A section reader opens its mapping with the keys it knows (anything else is reported as
/// unknown) and then reads them one by one. A key in the known list that the reader never
/// asks for would be accepted and ignored without a word; [`Problems::finish`] reports
/// each such key that the configuration sets.
#[derive(Debug)]
pub(crate) struct KeyReads {
    /// The mapping's path.
    path: String,
    /// The known keys written in the mapping.
    written: Vec<String>,
    /// The known keys not written (for the tests that check that a config sets every key).
    #[cfg_attr(not(test), allow(dead_code))]
    unwritten: Vec<String>,
    /// The keys a reader asked for.
    read: RefCell<BTreeSet<String>>,
}

impl KeyReads {
    /// Notes that the reader asked for `key`.
    pub(crate) fn mark(&self, key: &str) {
        if self.written.iter().any(|written| written == key) {
            self.read.borrow_mut().insert(key.to_owned());
        }
    }
}

impl Problems {
    /// Records a problem at `path`.
    pub(crate) fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.list.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    /// How many problems have been recorded (to tell whether a reader added any).
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether nothing has been recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Starts tracking which of `known` the reader of the mapping at `path` (whose keys are
    /// `keys`) asks for.
    pub(crate) fn track<'k>(
        &mut self,
        path: &str,
        known: &[&str],
        keys: impl Iterator<Item = &'k String>,
    ) -> Rc<KeyReads> {
        let keys: BTreeSet<&str> = keys.map(String::as_str).collect();
        let (written, unwritten): (Vec<&str>, Vec<&str>) =
            known.iter().partition(|key| keys.contains(**key));
        let reads = Rc::new(KeyReads {
            path: path.to_owned(),
            written: written.into_iter().map(str::to_owned).collect(),
            unwritten: unwritten.into_iter().map(str::to_owned).collect(),
            read: RefCell::new(BTreeSet::new()),
        });
        self.opened.push(reads.clone());
        reads
    }

    /// `Ok(value)` when nothing was recorded, else every problem.
    ///
    /// When nothing else was recorded, every known key that is written but was never read
    /// is recorded first. (With other problems, readers may stop early, on purpose, and
    /// leave keys unread.)
    pub(crate) fn finish<T>(mut self, value: T) -> Result<T, ConfigError> {
        if self.list.is_empty() {
            self.report_unread();
        }
        if self.list.is_empty() {
            Ok(value)
        } else {
            Err(ConfigError::new(self.list))
        }
    }

    /// Records each known key written in an opened mapping that no reader asked for.
    fn report_unread(&mut self) {
        let unread: Vec<String> = self
            .opened
            .iter()
            .flat_map(|reads| {
                let read = reads.read.borrow();
                reads
                    .written
                    .iter()
                    .filter(|key| !read.contains(key.as_str()))
                    .map(|key| join(&reads.path, key))
                    .collect::<Vec<_>>()
            })
            .collect();
        for path in unread {
            self.add(path, NEVER_READ);
        }
    }

    /// The known keys that the configuration does not write, as paths, in the order their
    /// mappings were opened.
    #[cfg(test)]
    pub(crate) fn unwritten_keys(&self) -> Vec<String> {
        self.opened
            .iter()
            .flat_map(|reads| reads.unwritten.iter().map(|key| join(&reads.path, key)))
            .collect()
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
