//! The library's modules depend on each other without a cycle, between files and between
//! top-level modules.
//!
//! The checker, [`module_cycles`], reads the library crate: `src/lib.rs` and the files its
//! `mod` declarations reach (`#[path]` included), not `src/main.rs` or `src/bin/`, which are
//! roots of other crates. Each file maps to its module path (`src/exporter/queue.rs` is
//! `crate::exporter::queue`). An edge goes from a file to the file of every module that a path
//! in its production code names: `use` trees, and every path in items, types, patterns and
//! expressions, plus `a::b` runs inside macro calls. Paths resolve through `crate::`,
//! `super::`, `self::`, a child module's name, or a name a `use` imported; the rest (`std`,
//! other crates, local items) name no module of ours.
//!
//! A path walks down through modules as far as it can (`crate::exporter::queue::X` reaches
//! `crate::exporter::queue`); the name after that, `X`, goes to the module that defines it,
//! following re-exports: an item `X` declared there stays there; an explicit `use .. X` there
//! is followed to its target; else the first glob `use m::*` there whose module declares or
//! re-exports `X` is followed; else the path names the module it reached. A `pub`,
//! `pub(crate)`, `pub(super)` or `pub(in ..)` `use` is seen from anywhere; a plain `use`
//! only from its own module and that module's descendants, as in Rust. So a child that
//! imports `super::Thing`, which its parent's `mod.rs` re-exports from `types.rs`, depends
//! on `types.rs`, not on the facade; the facade itself depends on `types.rs` through its
//! `pub use types::*`. A name imported from outside the crate names no module of ours.
//! A `mod child;` declaration is not an edge. Test code is skipped: items under
//! `#[cfg(test)]`, and the test module files they declare. Edges inside one file are ignored.
//!
//! Cycles are the strongly connected components of more than one node, at two levels: files,
//! and top-level modules (`crate::a::..` collapsed to `a`, edges inside `a` dropped). The
//! report prints one block per component: its members, one shortest cycle with the file:line
//! of every edge on it, then the component's other edges.
//!
//! The real-tree tests read the crate in `$MODULE_GRAPH_ROOT` when it is set (another
//! checkout of this crate, e.g. `MODULE_GRAPH_ROOT=/path/to/checkout cargo test --test
//! integration module_graph -- --ignored --nocapture`), else this crate's own directory.
//!
//! Line numbers: `proc-macro2` spans carry no line unless its `span-locations` feature is
//! on, which would take one more direct dependency. So before parsing, every identifier that
//! is not a keyword is renamed to `name__at_LINE` by a small lexer ([`tag_identifiers`]);
//! lines stay where they were, and each identifier syn hands back says where it came from.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use syn::buffer::Cursor;
use syn::visit::{self, Visit};
use syn::{Attribute, Ident, Item, UseTree};

/// How many import hops a path may take before resolution gives up (guards `use` loops).
const MAX_HOPS: u32 = 16;

/// The separator between an identifier and the line it was written on.
const LINE_TAG: &str = "__at_";

// === The report ===

/// One place in a file that names another module.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Site {
    /// The file, relative to the crate directory (`src/exporter/mod.rs`).
    file: String,
    /// 1-based; 0 when the path has no identifier to locate it by and no line matched.
    line: usize,
    /// The path as written, e.g. `super::queue::SendingQueue`.
    path: String,
}

/// One edge of a dependency graph, with every site that makes it, sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Edge {
    from: String,
    to: String,
    sites: Vec<Site>,
}

/// A strongly connected component of more than one node.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Component {
    /// Its nodes, sorted: file paths, or top-level module names.
    members: Vec<String>,
    /// One shortest cycle through the first member, as the edges along it.
    cycle: Vec<Edge>,
    /// The component's other edges, which a fix must also remove or reverse.
    other_edges: Vec<Edge>,
}

/// What the checker found in one crate.
#[derive(Debug)]
struct Report {
    /// Every library file read, relative to the crate directory, with its module path.
    files: BTreeMap<String, String>,
    /// Test module files, not read: declared under `#[cfg(test)]` (or `#![cfg(test)]`
    /// inside), or below the directory of such a module.
    test_files: BTreeSet<String>,
    /// `.rs` files under `src/` that no `mod` reaches and that are not other crates' roots.
    unreached: Vec<String>,
    /// Every edge between two library files.
    file_edges: BTreeMap<(String, String), Vec<Site>>,
    /// Cycles between files.
    file_cycles: Vec<Component>,
    /// Cycles between top-level modules (`crate::a::...` collapsed to `a`; the crate root
    /// file is `crate`).
    module_cycles: Vec<Component>,
}

impl Report {
    fn is_acyclic(&self) -> bool {
        self.file_cycles.is_empty() && self.module_cycles.is_empty()
    }
}

/// The most line numbers printed for one file on one edge.
const MAX_LINES_SHOWN: usize = 12;

fn write_edge(f: &mut fmt::Formatter<'_>, edge: &Edge) -> fmt::Result {
    writeln!(f, "    {} -> {}", edge.from, edge.to)?;
    let mut by_file: BTreeMap<&str, Vec<&Site>> = BTreeMap::new();
    for site in &edge.sites {
        by_file.entry(site.file.as_str()).or_default().push(site);
    }
    for (file, sites) in by_file {
        let first = sites[0];
        write!(
            f,
            "        {file}:{} `{}`",
            line_text(first.line),
            first.path
        )?;
        let more: BTreeSet<usize> = sites[1..]
            .iter()
            .map(|site| site.line)
            .filter(|&line| line != first.line)
            .collect();
        if !more.is_empty() {
            let shown: Vec<String> = more
                .iter()
                .take(MAX_LINES_SHOWN)
                .map(|&line| format!(":{}", line_text(line)))
                .collect();
            let rest = more.len().saturating_sub(MAX_LINES_SHOWN);
            write!(f, " (also {}", shown.join(" "))?;
            if rest > 0 {
                write!(f, " and {rest} more")?;
            }
            write!(f, ")")?;
        }
        writeln!(f)?;
    }
    Ok(())
}

fn line_text(line: usize) -> String {
    if line == 0 {
        "?".to_owned()
    } else {
        line.to_string()
    }
}

fn write_components(
    f: &mut fmt::Formatter<'_>,
    kind: &str,
    components: &[Component],
) -> fmt::Result {
    for (index, component) in components.iter().enumerate() {
        writeln!(
            f,
            "\n== {kind} cycle {} of {}: {} nodes in one strongly connected component",
            index + 1,
            components.len(),
            component.members.len(),
        )?;
        writeln!(f, "  members:")?;
        let mut row = String::new();
        for member in &component.members {
            if !row.is_empty() && row.len() + member.len() > 92 {
                writeln!(f, "     {row}")?;
                row.clear();
            }
            row.push(' ');
            row.push_str(member);
        }
        writeln!(f, "     {row}")?;
        writeln!(
            f,
            "  one cycle: {}",
            component
                .cycle
                .iter()
                .map(|edge| edge.from.as_str())
                .chain(component.cycle.first().map(|edge| edge.from.as_str()))
                .collect::<Vec<_>>()
                .join(" -> ")
        )?;
        for edge in &component.cycle {
            write_edge(f, edge)?;
        }
        if !component.other_edges.is_empty() {
            writeln!(f, "  other edges inside this component:")?;
            for edge in &component.other_edges {
                write_edge(f, edge)?;
            }
        }
    }
    Ok(())
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "module graph: {} library files, {} edges between files; {} file cycles, {} \
             top-level module cycles",
            self.files.len(),
            self.file_edges.len(),
            self.file_cycles.len(),
            self.module_cycles.len(),
        )?;
        if !self.unreached.is_empty() {
            writeln!(
                f,
                "files no `mod` declaration reaches (not checked): {}",
                self.unreached.join(", ")
            )?;
        }
        write_components(f, "file", &self.file_cycles)?;
        write_components(f, "top-level module", &self.module_cycles)?;
        Ok(())
    }
}

// === The checker ===

/// Reads the library crate in `crate_dir` (which holds `src/lib.rs`) and reports every
/// dependency cycle between its files and between its top-level modules.
///
/// # Errors
///
/// A file that cannot be read or parsed, or a `mod x;` whose file does not exist.
fn module_cycles(crate_dir: &Path) -> Result<Report, String> {
    let tree = Tree::load(crate_dir)?;

    let mut file_edges: BTreeMap<(String, String), Vec<Site>> = BTreeMap::new();
    for (file_id, file) in tree.files.iter().enumerate() {
        let mut walker = Walker {
            tree: &tree,
            module: file.module,
            blocks: Vec::new(),
            targets: Vec::new(),
        };
        walker.walk_items(&file.items);
        for (target, line, path) in walker.targets {
            let to = tree.modules[target].file;
            if to == file_id {
                continue;
            }
            let line = if line == 0 {
                find_line(&file.source, &path)
            } else {
                line
            };
            file_edges
                .entry((file.rel.clone(), tree.files[to].rel.clone()))
                .or_default()
                .push(Site {
                    file: file.rel.clone(),
                    line,
                    path,
                });
        }
    }
    for sites in file_edges.values_mut() {
        sites.sort();
        sites.dedup();
    }

    let top_of: HashMap<&str, String> = tree
        .files
        .iter()
        .map(|file| {
            let top = tree.modules[file.module]
                .path
                .first()
                .cloned()
                .unwrap_or_else(|| "crate".to_owned());
            (file.rel.as_str(), top)
        })
        .collect();
    let mut module_edges: BTreeMap<(String, String), Vec<Site>> = BTreeMap::new();
    for ((from, to), sites) in &file_edges {
        let (from, to) = (&top_of[from.as_str()], &top_of[to.as_str()]);
        if from != to {
            module_edges
                .entry((from.clone(), to.clone()))
                .or_default()
                .extend(sites.iter().cloned());
        }
    }
    for sites in module_edges.values_mut() {
        sites.sort();
    }

    let files = tree
        .files
        .iter()
        .map(|file| (file.rel.clone(), tree.module_name(file.module)))
        .collect();
    let (test_files, unreached) = tree.unread(crate_dir)?;
    Ok(Report {
        files,
        test_files,
        unreached,
        file_cycles: cycles(&file_edges),
        module_cycles: cycles(&module_edges),
        file_edges,
    })
}

/// The first line of `source` that contains `path` once spaces are removed: the fallback for
/// paths without an identifier (`use super::*`).
fn find_line(source: &str, path: &str) -> usize {
    let wanted: String = path.chars().filter(|c| !c.is_whitespace()).collect();
    source
        .lines()
        .position(|line| {
            let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            compact.contains(&wanted)
        })
        .map_or(0, |index| index + 1)
}

/// Every strongly connected component of more than one node, sorted by first member.
fn cycles(edges: &BTreeMap<(String, String), Vec<Site>>) -> Vec<Component> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
        next.entry(to).or_default();
    }
    let mut components: Vec<Component> = strongly_connected(&next)
        .into_iter()
        .filter(|members| members.len() > 1)
        .map(|members| component(members, &next, edges))
        .collect();
    components.sort_by(|a, b| a.members.cmp(&b.members));
    components
}

fn component(
    members: Vec<String>,
    next: &BTreeMap<&str, Vec<&str>>,
    edges: &BTreeMap<(String, String), Vec<Site>>,
) -> Component {
    let inside: BTreeSet<&str> = members.iter().map(String::as_str).collect();
    let start = members[0].as_str();
    // Breadth-first from `start` inside the component, back to `start`: a shortest cycle.
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    let mut last = None;
    'search: while let Some(node) = queue.pop_front() {
        for &succ in &next[node] {
            if !inside.contains(succ) {
                continue;
            }
            if succ == start {
                last = Some(node);
                break 'search;
            }
            if !came_from.contains_key(succ) {
                came_from.insert(succ, node);
                queue.push_back(succ);
            }
        }
    }
    let mut path = vec![start];
    let mut node = last.unwrap_or(start);
    while node != start {
        path.push(node);
        node = came_from[node];
    }
    path.push(start);
    path.reverse();
    // `path` is start, ..., start: the cycle's nodes in order.
    let edge = |from: &str, to: &str| Edge {
        from: from.to_owned(),
        to: to.to_owned(),
        sites: edges[&(from.to_owned(), to.to_owned())].clone(),
    };
    let cycle: Vec<Edge> = path.windows(2).map(|pair| edge(pair[0], pair[1])).collect();
    let on_cycle: BTreeSet<(&str, &str)> = path.windows(2).map(|pair| (pair[0], pair[1])).collect();
    let other_edges = edges
        .keys()
        .filter(|(from, to)| inside.contains(from.as_str()) && inside.contains(to.as_str()))
        .filter(|(from, to)| !on_cycle.contains(&(from.as_str(), to.as_str())))
        .map(|(from, to)| edge(from, to))
        .collect();
    Component {
        members,
        cycle,
        other_edges,
    }
}

/// Tarjan's algorithm; each component's members sorted.
fn strongly_connected(next: &BTreeMap<&str, Vec<&str>>) -> Vec<Vec<String>> {
    struct State<'a> {
        next: &'a BTreeMap<&'a str, Vec<&'a str>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        let index = state.index.len();
        state.index.insert(node, index);
        state.low.insert(node, index);
        state.stack.push(node);
        state.on_stack.insert(node);
        for &succ in &state.next[node] {
            if !state.index.contains_key(succ) {
                visit(state, succ);
                let low = state.low[node].min(state.low[succ]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(succ) {
                let low = state.low[node].min(state.index[succ]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut members = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                members.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            members.sort();
            state.out.push(members);
        }
    }
    let mut state = State {
        next,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &node in next.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.out
}

// === The module tree ===

/// Names a `use` binds in one scope, each to the path (as written) it imports.
type Bindings = HashMap<String, Vec<String>>;

/// One module-level `use` leaf: a name's target, or a glob's module.
struct Import {
    /// The path as written (`types::ComponentId`, or `types` for `types::*`).
    target: Vec<String>,
    /// Seen from outside its module and that module's descendants: `pub`, `pub(..)`.
    public: bool,
}

struct Module {
    /// Segments after `crate`.
    path: Vec<String>,
    /// The file that holds it (its own, or its parent's for an inline `mod x { }`).
    file: usize,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// Names its explicit `use` items bind; the first binding of a name wins.
    imports: HashMap<String, Import>,
    /// Its glob `use` items, in source order.
    globs: Vec<Import>,
    /// Names of the items it declares itself (structs, fns, consts, traits, macros, ..),
    /// child modules aside.
    declared: BTreeSet<String>,
}

/// Where a module's namespace says a name is defined.
enum Lookup {
    /// In this module of ours, or (`None`) outside the crate.
    Found(Option<usize>),
    /// The module neither declares the name nor imports it where the asker can see.
    Missing,
}

struct SourceFile {
    /// Relative to the crate directory, `/`-separated.
    rel: String,
    /// The module whose body is this file.
    module: usize,
    source: String,
    /// Its top-level items, identifiers tagged with their lines.
    items: Vec<Item>,
}

struct Tree {
    modules: Vec<Module>,
    files: Vec<SourceFile>,
    test_files: BTreeSet<String>,
    /// Directories (relative to the crate directory) whose files belong to test modules.
    test_dirs: Vec<String>,
}

impl Tree {
    fn load(crate_dir: &Path) -> Result<Tree, String> {
        let mut tree = Tree {
            modules: vec![Module {
                path: Vec::new(),
                file: 0,
                parent: None,
                children: BTreeMap::new(),
                imports: HashMap::new(),
                globs: Vec::new(),
                declared: BTreeSet::new(),
            }],
            files: Vec::new(),
            test_files: BTreeSet::new(),
            test_dirs: Vec::new(),
        };
        let src = crate_dir.join("src");
        let (rel, source, syntax) = read(crate_dir, &src.join("lib.rs"))?;
        if is_cfg_test(&syntax.attrs) {
            return Err("src/lib.rs is test-only (#![cfg(test)]): nothing to check".to_owned());
        }
        tree.add_file(0, rel, source, syntax, crate_dir, &src)?;
        Ok(tree)
    }

    /// Adds a parsed file as the body of `module` and declares what its items declare;
    /// `dir` is where its `mod x;` children live.
    fn add_file(
        &mut self,
        module: usize,
        rel: String,
        source: String,
        syntax: syn::File,
        crate_dir: &Path,
        dir: &Path,
    ) -> Result<(), String> {
        let file_dir = crate_dir
            .join(&rel)
            .parent()
            .map_or_else(|| dir.to_path_buf(), Path::to_path_buf);
        self.modules[module].file = self.files.len();
        self.files.push(SourceFile {
            rel,
            module,
            source,
            items: Vec::new(),
        });
        let file = self.files.len() - 1;
        self.declare(crate_dir, module, &syntax.items, dir, &file_dir)?;
        self.files[file].items = syntax.items;
        Ok(())
    }

    /// Registers the imports, items and child modules declared by `items`, the body of
    /// `module`.
    /// `dir` is where its `mod x;` children live, `path_base` what their `#[path]` is relative
    /// to (the file's directory at a file's top level, `dir` inside an inline module).
    fn declare(
        &mut self,
        crate_dir: &Path,
        module: usize,
        items: &[Item],
        dir: &Path,
        path_base: &Path,
    ) -> Result<(), String> {
        for item in items {
            match item {
                Item::Use(item_use) if !is_cfg_test(&item_use.attrs) => {
                    let public = !matches!(item_use.vis, syn::Visibility::Inherited);
                    for leaf in use_leaves(&item_use.tree) {
                        let target = leaf.segs.into_iter().map(|(seg, _)| seg).collect();
                        let import = Import { target, public };
                        if leaf.glob {
                            self.modules[module].globs.push(import);
                        } else if let Some(name) = leaf.binding {
                            self.modules[module].imports.entry(name).or_insert(import);
                        }
                    }
                }
                Item::Use(_) => {}
                Item::Mod(item_mod) => {
                    let name = untag(&item_mod.ident).0;
                    let test = is_cfg_test(&item_mod.attrs);
                    match &item_mod.content {
                        Some(_) if test => {
                            self.test_dirs.push(relative(crate_dir, &dir.join(&name)))
                        }
                        Some((_, inner)) => {
                            let child = self.add_module(module, &name, self.modules[module].file);
                            let child_dir = dir.join(&name);
                            self.declare(crate_dir, child, inner, &child_dir, &child_dir)?;
                        }
                        None => {
                            let (path, child_dir) =
                                module_file(&item_mod.attrs, &name, dir, path_base).map_err(
                                    |error| {
                                        let file = &self.files[self.modules[module].file].rel;
                                        format!("{file}: `mod {name};`: {error}")
                                    },
                                )?;
                            if test {
                                self.add_test_file(crate_dir, &path, &child_dir);
                                continue;
                            }
                            let (rel, source, syntax) = read(crate_dir, &path)?;
                            if is_cfg_test(&syntax.attrs) {
                                // `#![cfg(test)]` at the top of the file: a test module after all.
                                self.add_test_file(crate_dir, &path, &child_dir);
                            } else {
                                let child = self.add_module(module, &name, usize::MAX);
                                self.add_file(child, rel, source, syntax, crate_dir, &child_dir)?;
                            }
                        }
                    }
                }
                _ if is_cfg_test(item_attrs(item)) => {}
                _ => {
                    let declared = &mut self.modules[module].declared;
                    declared.extend(declared_names(item).iter().map(|ident| untag(ident).0));
                }
            }
        }
        Ok(())
    }

    fn add_module(&mut self, parent: usize, name: &str, file: usize) -> usize {
        let mut path = self.modules[parent].path.clone();
        path.push(name.to_owned());
        self.modules.push(Module {
            path,
            file,
            parent: Some(parent),
            children: BTreeMap::new(),
            imports: HashMap::new(),
            globs: Vec::new(),
            declared: BTreeSet::new(),
        });
        let id = self.modules.len() - 1;
        self.modules[parent].children.insert(name.to_owned(), id);
        id
    }

    /// Records a test module file, unread: its own children (`dir`) are test code too.
    fn add_test_file(&mut self, crate_dir: &Path, path: &Path, dir: &Path) {
        self.test_files.insert(relative(crate_dir, path));
        self.test_dirs.push(relative(crate_dir, dir));
    }

    fn module_name(&self, module: usize) -> String {
        std::iter::once("crate")
            .chain(self.modules[module].path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("::")
    }

    /// Sorts the `.rs` files under `src/` that were not read: test module files (declared
    /// under `#[cfg(test)]`, or below the directory of one), and the unreached rest, other
    /// crates' roots (`src/main.rs`, `src/bin/`) left out.
    fn unread(&self, crate_dir: &Path) -> Result<(BTreeSet<String>, Vec<String>), String> {
        let mut all = Vec::new();
        rust_files(&crate_dir.join("src"), &mut all)?;
        let read: BTreeSet<&str> = self.files.iter().map(|file| file.rel.as_str()).collect();
        let mut test_files = self.test_files.clone();
        let mut unreached = Vec::new();
        for rel in all.iter().map(|path| relative(crate_dir, path)) {
            if read.contains(rel.as_str()) || test_files.contains(&rel) {
                continue;
            }
            if rel == "src/main.rs" || rel.starts_with("src/bin/") {
                continue;
            }
            let in_test_dir = self.test_dirs.iter().any(|dir| {
                rel.strip_prefix(dir.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
            });
            if in_test_dir {
                test_files.insert(rel);
            } else {
                unreached.push(rel);
            }
        }
        unreached.sort();
        Ok((test_files, unreached))
    }

    /// The module that `segs`, written in module `at` (inside blocks that bind `blocks`),
    /// names, and whether it walked through every segment it may; `None` when it names no
    /// module of ours.
    ///
    /// With `whole`, the last segment may name a module (a `use` path); otherwise it names an
    /// item and is not walked: a single-segment path names a module only through an import.
    /// The first segment that is not walked (the item, or a name that is no module) goes to
    /// the module that defines it, through re-exports ([`Tree::settle`]).
    fn resolve(
        &self,
        at: usize,
        blocks: &[Bindings],
        segs: &[String],
        whole: bool,
        hops: u32,
    ) -> Option<(usize, bool)> {
        if segs.is_empty() || hops > MAX_HOPS {
            return None;
        }
        let walkable = if whole { segs.len() } else { segs.len() - 1 };
        let first = segs[0].as_str();
        match first {
            "crate" | "self" | "super" => {
                if walkable == 0 {
                    return None;
                }
                let (mut module, mut k) = match first {
                    "crate" => (0, 1),
                    "self" => (at, 1),
                    _ => (at, 0),
                };
                while k < walkable && segs[k] == "super" {
                    module = self.modules[module].parent?;
                    k += 1;
                }
                self.walk(module, &segs[k..walkable], segs.get(walkable), at, hops)
            }
            "Self" => None,
            name => {
                let rebased = |target: &Vec<String>| {
                    let mut full = target.clone();
                    full.extend(segs[1..].iter().cloned());
                    full
                };
                // A lone name used as a value or type cannot be an imported module: it is a
                // local (`let duration = ..` beside `use super::duration`).
                let imported = |target: &Vec<String>| {
                    let is_module = matches!(
                        self.resolve(at, &[], target, true, hops + 1),
                        Some((_, true))
                    );
                    if segs.len() == 1 && !whole && is_module {
                        None
                    } else {
                        self.resolve(at, &[], &rebased(target), whole, hops + 1)
                    }
                };
                if let Some(target) = blocks.iter().rev().find_map(|scope| scope.get(name)) {
                    return imported(target);
                }
                if walkable >= 1
                    && let Some(&child) = self.modules[at].children.get(name)
                {
                    return self.walk(child, &segs[1..walkable], segs.get(walkable), at, hops);
                }
                imported(&self.modules[at].imports.get(name)?.target)
            }
        }
    }

    /// Walks `segs` down from `module` through child modules and imported modules, then
    /// settles the first segment that is not one, or else `next` (the item a non-`use` path
    /// ends in), on the module that defines it, as seen from `viewer`.
    fn walk(
        &self,
        mut module: usize,
        segs: &[String],
        next: Option<&String>,
        viewer: usize,
        hops: u32,
    ) -> Option<(usize, bool)> {
        for seg in segs {
            if let Some(&child) = self.modules[module].children.get(seg) {
                module = child;
                continue;
            }
            let alias = self.modules[module]
                .imports
                .get(seg)
                .and_then(|import| self.resolve(module, &[], &import.target, true, hops + 1));
            match alias {
                Some((target, true)) => module = target,
                _ => {
                    return self
                        .settle(module, seg, viewer, hops)
                        .map(|found| (found, false));
                }
            }
        }
        match next {
            Some(name) => self
                .settle(module, name, viewer, hops)
                .map(|found| (found, true)),
            None => Some((module, true)),
        }
    }

    /// The module that defines `name`, named through `module` by code in `viewer`: where
    /// `module`'s re-exports lead, or `module` itself when they lead nowhere.
    fn settle(&self, module: usize, name: &str, viewer: usize, hops: u32) -> Option<usize> {
        match self.lookup(module, name, viewer, hops) {
            Lookup::Found(found) => found,
            Lookup::Missing => Some(module),
        }
    }

    /// Where `module`'s namespace, as `viewer` sees it, says `name` is defined: an item
    /// declared in `module`, then an explicit import, then the first glob import that
    /// provides it, then a child module of that name.
    fn lookup(&self, module: usize, name: &str, viewer: usize, hops: u32) -> Lookup {
        if hops > MAX_HOPS {
            return Lookup::Missing;
        }
        let here = &self.modules[module];
        if here.declared.contains(name) {
            return Lookup::Found(Some(module));
        }
        if let Some(import) = here.imports.get(name)
            && self.sees(viewer, module, import)
        {
            // The import is written in `module`: `module` is who looks further.
            let found = self.resolve(module, &[], &import.target, false, hops + 1);
            return Lookup::Found(found.map(|(target, _)| target));
        }
        for glob in &here.globs {
            if !self.sees(viewer, module, glob) {
                continue;
            }
            let Some((source, true)) = self.resolve(module, &[], &glob.target, true, hops + 1)
            else {
                continue;
            };
            if source == module {
                continue;
            }
            if let Lookup::Found(found) = self.lookup(source, name, module, hops + 1) {
                return Lookup::Found(found);
            }
        }
        match here.children.get(name) {
            Some(&child) => Lookup::Found(Some(child)),
            None => Lookup::Missing,
        }
    }

    /// Whether code in `viewer` sees `import`, a `use` of `owner`: a `pub(..)` one from
    /// anywhere, a plain one from `owner` and its descendants only.
    fn sees(&self, viewer: usize, owner: usize, import: &Import) -> bool {
        if import.public {
            return true;
        }
        let mut module = Some(viewer);
        while let Some(current) = module {
            if current == owner {
                return true;
            }
            module = self.modules[current].parent;
        }
        false
    }
}

/// The file of `mod name;` and the directory of its own children. `dir` is where the
/// declaring module's children live; `#[path]` is relative to `path_base`.
fn module_file(
    attrs: &[Attribute],
    name: &str,
    dir: &Path,
    path_base: &Path,
) -> Result<(PathBuf, PathBuf), String> {
    if let Some(explicit) = path_attribute(attrs) {
        let path = path_base.join(explicit);
        let child_dir = path
            .parent()
            .map_or_else(|| dir.to_path_buf(), Path::to_path_buf);
        return if path.is_file() {
            Ok((path, child_dir))
        } else {
            Err(format!("#[path] file {} does not exist", path.display()))
        };
    }
    let flat = dir.join(format!("{name}.rs"));
    if flat.is_file() {
        return Ok((flat, dir.join(name)));
    }
    let nested = dir.join(name).join("mod.rs");
    if nested.is_file() {
        return Ok((nested, dir.join(name)));
    }
    Err(format!(
        "neither {} nor {} exists",
        flat.display(),
        nested.display()
    ))
}

fn path_attribute(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| {
        let syn::Meta::NameValue(meta) = &attr.meta else {
            return None;
        };
        if !path_is(&meta.path, "path") {
            return None;
        }
        match &meta.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) => Some(text.value()),
            _ => None,
        }
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries =
        fs::read_dir(dir).map_err(|error| format!("cannot list {}: {error}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|error| format!("cannot list {}: {error}", dir.display()))?
            .path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

fn relative(crate_dir: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(crate_dir).unwrap_or(path);
    rel.components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Reads and parses one file: its path relative to the crate directory, its text, its syntax.
fn read(crate_dir: &Path, path: &Path) -> Result<(String, String, syn::File), String> {
    let rel = relative(crate_dir, path);
    let source = fs::read_to_string(path).map_err(|error| format!("cannot read {rel}: {error}"))?;
    let syntax = syn::parse_file(&tag_identifiers(&source))
        .map_err(|error| format!("cannot parse {rel}: {error} (is it valid Rust?)"))?;
    Ok((rel, source, syntax))
}

// === Paths in one module ===

/// Visits the production code of one module (not its child modules, not test items) and
/// collects the module every path names.
struct Walker<'a> {
    tree: &'a Tree,
    module: usize,
    /// Bindings of the `use` items of the enclosing blocks, innermost last.
    blocks: Vec<Bindings>,
    /// (module named, line, path as written).
    targets: Vec<(usize, usize, String)>,
}

impl Walker<'_> {
    fn walk_items(&mut self, items: &[Item]) {
        for item in items {
            match item {
                Item::Mod(item_mod) if !is_cfg_test(&item_mod.attrs) => {
                    if let Some((_, inner)) = &item_mod.content {
                        let name = untag(&item_mod.ident).0;
                        if let Some(&child) = self.tree.modules[self.module].children.get(&name) {
                            let outer = std::mem::replace(&mut self.module, child);
                            let blocks = std::mem::take(&mut self.blocks);
                            self.walk_items(inner);
                            self.module = outer;
                            self.blocks = blocks;
                        }
                    }
                }
                _ => self.visit_item(item),
            }
        }
    }

    fn record(&mut self, segs: &[(String, usize)], whole: bool, suffix: &str) {
        let names: Vec<String> = segs.iter().map(|(name, _)| name.clone()).collect();
        let Some((target, _)) = self
            .tree
            .resolve(self.module, &self.blocks, &names, whole, 0)
        else {
            return;
        };
        let line = segs
            .iter()
            .map(|&(_, line)| line)
            .find(|&line| line > 0)
            .unwrap_or(0);
        self.targets
            .push((target, line, format!("{}{suffix}", names.join("::"))));
    }

    /// Paths of two or more segments in a macro's tokens, which syn leaves unparsed.
    fn scan_tokens(&mut self, cursor: Cursor<'_>) {
        let mut paths = Vec::new();
        scan(cursor, &mut paths);
        for segs in paths {
            self.record(&segs, false, "");
        }
    }
}

/// Collects, from `cursor` on, every run `a::b::c` of two or more identifiers.
fn scan(mut cursor: Cursor<'_>, out: &mut Vec<Vec<(String, usize)>>) {
    fn flush(current: &mut Vec<(String, usize)>, out: &mut Vec<Vec<(String, usize)>>) {
        if current.len() > 1 {
            out.push(std::mem::take(current));
        }
        current.clear();
    }
    let mut current: Vec<(String, usize)> = Vec::new();
    let mut after_colons = false;
    while !cursor.eof() {
        if let Some((ident, rest)) = cursor.ident() {
            if !after_colons {
                flush(&mut current, out);
            }
            current.push(untag(&ident));
            after_colons = false;
            cursor = rest;
            continue;
        }
        let colons = cursor.punct().and_then(|(first, rest)| {
            let (second, after) = rest.punct()?;
            (first.as_char() == ':' && second.as_char() == ':').then_some(after)
        });
        match colons {
            Some(after) if !current.is_empty() && !after_colons => {
                after_colons = true;
                cursor = after;
                continue;
            }
            _ => {}
        }
        flush(&mut current, out);
        after_colons = false;
        if let Some((inside, _, _, rest)) = cursor.any_group() {
            scan(inside, out);
            cursor = rest;
        } else if let Some((_, rest)) = cursor.token_tree() {
            cursor = rest;
        } else {
            break;
        }
    }
    flush(&mut current, out);
}

impl<'ast> Visit<'ast> for Walker<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        match item {
            // Child modules are walked as their own modules; nested ones in blocks are rare
            // enough to skip.
            Item::Mod(_) => {}
            Item::Use(item_use) if !is_cfg_test(&item_use.attrs) => {
                for leaf in use_leaves(&item_use.tree) {
                    let suffix = if leaf.glob { "::*" } else { "" };
                    self.record(&leaf.segs, true, suffix);
                }
            }
            Item::Use(_) => {}
            _ if is_cfg_test(item_attrs(item)) => {}
            _ => visit::visit_item(self, item),
        }
    }

    fn visit_block(&mut self, block: &'ast syn::Block) {
        let mut bindings = Bindings::new();
        for stmt in &block.stmts {
            if let syn::Stmt::Item(Item::Use(item_use)) = stmt {
                if is_cfg_test(&item_use.attrs) {
                    continue;
                }
                for leaf in use_leaves(&item_use.tree) {
                    if let Some(name) = leaf.binding {
                        let segs = leaf.segs.into_iter().map(|(seg, _)| seg).collect();
                        bindings.entry(name).or_insert(segs);
                    }
                }
            }
        }
        self.blocks.push(bindings);
        visit::visit_block(self, block);
        self.blocks.pop();
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segs: Vec<(String, usize)> =
                path.segments.iter().map(|seg| untag(&seg.ident)).collect();
            self.record(&segs, false, "");
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        let buffer = syn::buffer::TokenBuffer::new2(mac.tokens.clone());
        self.scan_tokens(buffer.begin());
    }

    // Attributes and visibilities (`pub(super)`) name modules without depending on them.
    fn visit_attribute(&mut self, _: &'ast Attribute) {}
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(item) => &item.attrs,
            syn::ImplItem::Fn(item) => &item.attrs,
            syn::ImplItem::Type(item) => &item.attrs,
            syn::ImplItem::Macro(item) => &item.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        if !is_cfg_test(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs = match item {
            syn::TraitItem::Const(item) => &item.attrs,
            syn::TraitItem::Fn(item) => &item.attrs,
            syn::TraitItem::Type(item) => &item.attrs,
            syn::TraitItem::Macro(item) => &item.attrs,
            _ => return visit::visit_trait_item(self, item),
        };
        if !is_cfg_test(attrs) {
            visit::visit_trait_item(self, item);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if !is_cfg_test(&field.attrs) {
            visit::visit_field(self, field);
        }
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        if !is_cfg_test(&variant.attrs) {
            visit::visit_variant(self, variant);
        }
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        if !is_cfg_test(&arm.attrs) {
            visit::visit_arm(self, arm);
        }
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        if !is_cfg_test(&local.attrs) {
            visit::visit_local(self, local);
        }
    }
}

/// The names an item declares in its module's namespace (none for `use`, `impl`, `mod`,
/// which are handled on their own, or a macro call).
fn declared_names(item: &Item) -> Vec<&Ident> {
    match item {
        Item::Const(item) => vec![&item.ident],
        Item::Enum(item) => vec![&item.ident],
        Item::Fn(item) => vec![&item.sig.ident],
        Item::Macro(item) => item.ident.iter().collect(),
        Item::Static(item) => vec![&item.ident],
        Item::Struct(item) => vec![&item.ident],
        Item::Trait(item) => vec![&item.ident],
        Item::TraitAlias(item) => vec![&item.ident],
        Item::Type(item) => vec![&item.ident],
        Item::Union(item) => vec![&item.ident],
        Item::ForeignMod(block) => block
            .items
            .iter()
            .filter_map(|item| match item {
                syn::ForeignItem::Fn(item) => Some(&item.sig.ident),
                syn::ForeignItem::Static(item) => Some(&item.ident),
                syn::ForeignItem::Type(item) => Some(&item.ident),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(item) => &item.attrs,
        Item::Enum(item) => &item.attrs,
        Item::ExternCrate(item) => &item.attrs,
        Item::Fn(item) => &item.attrs,
        Item::ForeignMod(item) => &item.attrs,
        Item::Impl(item) => &item.attrs,
        Item::Macro(item) => &item.attrs,
        Item::Mod(item) => &item.attrs,
        Item::Static(item) => &item.attrs,
        Item::Struct(item) => &item.attrs,
        Item::Trait(item) => &item.attrs,
        Item::TraitAlias(item) => &item.attrs,
        Item::Type(item) => &item.attrs,
        Item::Union(item) => &item.attrs,
        Item::Use(item) => &item.attrs,
        _ => &[],
    }
}

// === Use trees ===

/// One imported path of a `use` tree.
struct UseLeaf {
    /// The path, each segment with its line.
    segs: Vec<(String, usize)>,
    /// `path::*`.
    glob: bool,
    /// The name it binds in scope, if any.
    binding: Option<String>,
}

/// The imported paths of a `use` tree; none for `::`-rooted (external) paths.
fn use_leaves(tree: &UseTree) -> Vec<UseLeaf> {
    fn collect(tree: &UseTree, prefix: &mut Vec<(String, usize)>, out: &mut Vec<UseLeaf>) {
        match tree {
            UseTree::Path(path) => {
                prefix.push(untag(&path.ident));
                collect(&path.tree, prefix, out);
                prefix.pop();
            }
            UseTree::Name(name) => {
                let (ident, line) = untag(&name.ident);
                if ident == "self" {
                    // `use a::b::{self}` imports `a::b` itself.
                    let binding = prefix.last().map(|(last, _)| last.clone());
                    out.push(UseLeaf {
                        segs: prefix.clone(),
                        glob: false,
                        binding,
                    });
                } else {
                    let mut segs = prefix.clone();
                    segs.push((ident.clone(), line));
                    out.push(UseLeaf {
                        segs,
                        glob: false,
                        binding: Some(ident),
                    });
                }
            }
            UseTree::Rename(rename) => {
                let (ident, line) = untag(&rename.ident);
                let alias = untag(&rename.rename).0;
                let mut segs = prefix.clone();
                if ident != "self" {
                    segs.push((ident, line));
                }
                out.push(UseLeaf {
                    segs,
                    glob: false,
                    binding: (alias != "_").then_some(alias),
                });
            }
            UseTree::Glob(_) => out.push(UseLeaf {
                segs: prefix.clone(),
                glob: true,
                binding: None,
            }),
            UseTree::Group(group) => {
                for tree in &group.items {
                    collect(tree, prefix, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    collect(tree, &mut Vec::new(), &mut out);
    out.retain(|leaf| !leaf.segs.is_empty());
    out
}

// === Attributes ===

fn path_is(path: &syn::Path, name: &str) -> bool {
    path.segments.len() == 1 && untag(&path.segments[0].ident).0 == name
}

/// `#[cfg(test)]`, or `#[cfg(all(test, ...))]`: code that exists only in test builds.
fn is_cfg_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let syn::Meta::List(list) = &attr.meta else {
            return false;
        };
        if !path_is(&list.path, "cfg") {
            return false;
        }
        let buffer = syn::buffer::TokenBuffer::new2(list.tokens.clone());
        let cursor = buffer.begin();
        let Some((ident, rest)) = cursor.ident() else {
            return false;
        };
        match untag(&ident).0.as_str() {
            "test" => rest.eof(),
            "all" => rest.any_group().is_some_and(|(inside, _, _, _)| {
                top_level_words(inside).iter().any(|word| word == "test")
            }),
            _ => false,
        }
    })
}

/// The bare words of a comma-separated predicate list (`test`, not `feature = "x"`).
fn top_level_words(mut cursor: Cursor<'_>) -> Vec<String> {
    let mut words = Vec::new();
    while let Some((_, rest)) = cursor.token_tree() {
        if let Some((ident, after)) = cursor.ident() {
            let bare = after.eof() || after.punct().is_some_and(|(p, _)| p.as_char() == ',');
            if bare {
                words.push(untag(&ident).0);
            }
        }
        cursor = rest;
    }
    words
}

// === Line tags ===

/// An identifier's name and the line it was written on (0 for keywords, which are untagged).
fn untag(ident: &Ident) -> (String, usize) {
    let text = ident.to_string();
    let text = text.strip_prefix("r#").unwrap_or(&text);
    match text.rsplit_once(LINE_TAG) {
        Some((name, line)) => match line.parse() {
            Ok(line) => (name.to_owned(), line),
            Err(_) => (text.to_owned(), 0),
        },
        None => (text.to_owned(), 0),
    }
}

/// `source` with every identifier outside comments and literals that is not a keyword
/// renamed to `name__at_LINE`. Nothing else changes, so the result parses as `source` does.
///
/// Works on bytes: outside comments and literals a non-ASCII byte can only belong to an
/// identifier, and every place the lexer cuts is an ASCII byte, so slices stay valid UTF-8.
fn tag_identifiers(source: &str) -> String {
    let bytes = source.as_bytes();
    let len = bytes.len();
    let at = |index: usize| bytes.get(index).copied();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80;
    let mut out = String::with_capacity(len + len / 2);
    let mut line = 1;
    let mut i = 0;
    // Copies source[from..to] verbatim, counting lines; returns where it stopped.
    let copy = |out: &mut String, line: &mut usize, from: usize, to: usize| {
        let to = to.min(len);
        *line += bytes[from..to].iter().filter(|&&b| b == b'\n').count();
        out.push_str(&source[from..to]);
        to
    };
    while i < len {
        let b = bytes[i];
        i = if b == b'/' && at(i + 1) == Some(b'/') {
            let end = (i..len).find(|&j| bytes[j] == b'\n').unwrap_or(len);
            copy(&mut out, &mut line, i, end)
        } else if b == b'/' && at(i + 1) == Some(b'*') {
            let mut depth = 0;
            let mut j = i;
            while j < len {
                if bytes[j] == b'/' && at(j + 1) == Some(b'*') {
                    depth += 1;
                    j += 2;
                } else if bytes[j] == b'*' && at(j + 1) == Some(b'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            copy(&mut out, &mut line, i, j)
        } else if b == b'"' {
            let mut j = i + 1;
            while j < len && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            copy(&mut out, &mut line, i, j + 1)
        } else if b == b'\'' {
            // A char literal ('x', '\n', '\u{..}', 'é') or a lifetime / label ('a).
            let char_len = source[i + 1..].chars().next().map_or(1, char::len_utf8);
            if at(i + 1) == Some(b'\\') {
                let mut j = i + 3;
                while j < len && bytes[j] != b'\'' {
                    j += 1;
                }
                copy(&mut out, &mut line, i, j + 1)
            } else if at(i + 1 + char_len) == Some(b'\'') {
                copy(&mut out, &mut line, i, i + 2 + char_len)
            } else {
                copy(&mut out, &mut line, i, i + 1)
            }
        } else if is_ident(b) && !b.is_ascii_digit() {
            let end = (i..len).find(|&j| !is_ident(bytes[j])).unwrap_or(len);
            let word = &source[i..end];
            let next = at(end);
            if matches!(word, "r" | "br" | "cr") && matches!(next, Some(b'"' | b'#')) {
                let hashes = (end..len).take_while(|&k| bytes[k] == b'#').count();
                if at(end + hashes) == Some(b'"') {
                    // A raw string: ends at a quote followed by as many hashes.
                    let closes = |k: usize| {
                        bytes[k] == b'"' && (1..=hashes).all(|h| at(k + h) == Some(b'#'))
                    };
                    let close = (end + hashes + 1..len).find(|&k| closes(k)).unwrap_or(len);
                    i = copy(&mut out, &mut line, i, close + 1 + hashes);
                    continue;
                }
                if word == "r" && hashes == 1 {
                    // A raw identifier: the name after `r#` is tagged on the next turn.
                    i = copy(&mut out, &mut line, i, end + 1);
                    continue;
                }
            }
            if matches!(word, "b" | "c") && matches!(next, Some(b'"' | b'\'')) {
                // A byte or C string, or a byte char: the literal is copied on the next turn.
                i = copy(&mut out, &mut line, i, end);
                continue;
            }
            out.push_str(word);
            if !is_keyword(word) {
                out.push_str(LINE_TAG);
                out.push_str(&line.to_string());
            }
            end
        } else if b.is_ascii_digit() {
            // A number, suffix included (`1_000u64`, `0x1F`, `1.5e3`): never tagged.
            let mut j = i;
            while j < len
                && (is_ident(bytes[j])
                    || (bytes[j] == b'.' && at(j + 1).is_some_and(|d| d.is_ascii_digit())))
            {
                j += 1;
            }
            copy(&mut out, &mut line, i, j)
        } else {
            let char_len = source[i..].chars().next().map_or(1, char::len_utf8);
            copy(&mut out, &mut line, i, i + char_len)
        };
    }
    out
}

/// Identifiers the lexer leaves alone, because syn recognises them by their text.
fn is_keyword(word: &str) -> bool {
    matches!(
        word,
        "_" | "abstract"
            | "as"
            | "async"
            | "auto"
            | "await"
            | "become"
            | "box"
            | "break"
            | "builtin"
            | "const"
            | "continue"
            | "crate"
            | "default"
            | "do"
            | "dyn"
            | "else"
            | "enum"
            | "extern"
            | "false"
            | "final"
            | "fn"
            | "for"
            | "gen"
            | "if"
            | "impl"
            | "in"
            | "let"
            | "loop"
            | "macro"
            | "macro_rules"
            | "match"
            | "mod"
            | "move"
            | "mut"
            | "override"
            | "priv"
            | "pub"
            | "raw"
            | "ref"
            | "return"
            | "safe"
            | "self"
            | "Self"
            | "static"
            | "struct"
            | "super"
            | "trait"
            | "true"
            | "try"
            | "type"
            | "typeof"
            | "union"
            | "unsafe"
            | "unsized"
            | "use"
            | "virtual"
            | "where"
            | "while"
            | "yield"
    )
}

// === Tests ===

/// Writes `files` (paths relative to the crate directory) into a temporary crate.
fn crate_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, text) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().expect("parent")).expect("create dirs");
        fs::write(&path, text).expect("write file");
    }
    dir
}

fn check(files: &[(&str, &str)]) -> Report {
    let dir = crate_with(files);
    module_cycles(dir.path()).expect("the checker reads the synthetic crate")
}

/// The crate the real-tree tests read: `$MODULE_GRAPH_ROOT` when set, else this crate.
fn real_root() -> PathBuf {
    std::env::var_os("MODULE_GRAPH_ROOT")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// The file edges of `report`, as (from, to) pairs.
fn edge_pairs(report: &Report) -> Vec<(&str, &str)> {
    report
        .file_edges
        .keys()
        .map(|(from, to)| (from.as_str(), to.as_str()))
        .collect()
}

fn site(file: &str, line: usize, path: &str) -> Site {
    Site {
        file: file.to_owned(),
        line,
        path: path.to_owned(),
    }
}

/// Scenario: the library in `src/` as it is (or in `$MODULE_GRAPH_ROOT/src/`), read by the
/// checker.
/// Guarantees: the library has no module dependency cycle: none between files, none between
/// top-level modules; on failure the message lists each cycle with the file:line of every
/// edge in it.
#[test]
fn src_has_no_module_cycle() {
    let report = module_cycles(&real_root()).expect("src/ reads");
    assert!(report.is_acyclic(), "{report}");
}

/// Scenario: the checker reads the real `src/` (or `$MODULE_GRAPH_ROOT/src/`), whatever its
/// cycles.
/// Guarantees: every file parses; every `.rs` file under `src/` is either read as a library
/// module or skipped as a test module or another crate's root, so no file escapes the check;
/// files map to their module paths.
#[test]
fn checker_reads_the_whole_library() {
    let report = module_cycles(&real_root()).expect("src/ reads");
    assert!(report.unreached.is_empty(), "{report}");
    assert_eq!(
        report.files.get("src/lib.rs").map(String::as_str),
        Some("crate")
    );
    assert_eq!(
        report.files.get("src/exporter/mod.rs").map(String::as_str),
        Some("crate::exporter")
    );
    assert!(!report.files.contains_key("src/main.rs"));
    assert!(report.test_files.contains("src/config/tests.rs"));
    assert!(
        report
            .files
            .keys()
            .all(|file| !report.test_files.contains(file))
    );
}

/// Scenario: a parent names a child (`self::b::Worker`) and the child names the parent
/// (`super::Shared`).
/// Guarantees: one file cycle of the two files, each edge with its file:line and the path as
/// written; no top-level cycle (both files are in `a`).
#[test]
fn two_file_cycle_through_super_is_found() {
    let report = check(&[
        ("src/lib.rs", "pub mod a;\n"),
        (
            "src/a/mod.rs",
            "mod b;\n\npub struct Shared;\n\npub fn make() -> self::b::Worker {\n    todo!()\n}\n",
        ),
        (
            "src/a/b.rs",
            "use super::Shared;\n\npub struct Worker(Shared);\n",
        ),
    ]);
    assert_eq!(report.files["src/a/b.rs"], "crate::a::b");
    assert_eq!(report.file_cycles.len(), 1, "{report}");
    let cycle = &report.file_cycles[0];
    assert_eq!(cycle.members, ["src/a/b.rs", "src/a/mod.rs"]);
    assert_eq!(cycle.cycle.len(), 2);
    assert_eq!(
        cycle.cycle[0].sites,
        [
            site("src/a/b.rs", 1, "super::Shared"),
            site("src/a/b.rs", 3, "Shared"),
        ]
    );
    assert_eq!(
        cycle.cycle[1].sites,
        [site("src/a/mod.rs", 5, "self::b::Worker")]
    );
    assert!(report.module_cycles.is_empty(), "{report}");
    assert!(!report.is_acyclic());
}

/// Scenario: a parent re-exports a child's type (`pub use child::X`); the child imports a
/// sibling directly (`super::sibling::Y`), not through the parent.
/// Guarantees: no cycle; the re-export is an edge parent -> child and the import an edge
/// child -> sibling; `mod child;` alone makes no edge to `sibling` from the parent.
#[test]
fn parent_reexporting_child_that_imports_sibling_is_acyclic() {
    let report = check(&[
        ("src/lib.rs", "pub mod p;\n"),
        (
            "src/p/mod.rs",
            "mod child;\nmod sibling;\n\npub use child::X;\n",
        ),
        (
            "src/p/child.rs",
            "use super::sibling::Y;\n\npub struct X(pub Y);\n",
        ),
        ("src/p/sibling.rs", "pub struct Y;\n"),
    ]);
    assert!(report.is_acyclic(), "{report}");
    let edges: Vec<(&str, &str)> = report
        .file_edges
        .keys()
        .map(|(from, to)| (from.as_str(), to.as_str()))
        .collect();
    assert_eq!(
        edges,
        [
            ("src/p/child.rs", "src/p/sibling.rs"),
            ("src/p/mod.rs", "src/p/child.rs"),
        ]
    );
    assert_eq!(
        report.file_edges[&("src/p/mod.rs".to_owned(), "src/p/child.rs".to_owned())],
        [site("src/p/mod.rs", 4, "child::X")]
    );
}

/// Scenario: a parent calls into a child by a bare path (`inner::go()`, no `use`), and the
/// child names the parent by `crate::m::Config`.
/// Guarantees: the file cycle is found, the bare path resolved through the child module.
#[test]
fn cycle_through_bare_child_module_path_is_found() {
    let report = check(&[
        ("src/lib.rs", "pub mod m;\n"),
        (
            "src/m/mod.rs",
            "mod inner;\n\npub struct Config;\n\npub fn run() {\n    inner::go();\n}\n",
        ),
        (
            "src/m/inner.rs",
            "pub fn go() {\n    let _config = crate::m::Config;\n}\n",
        ),
    ]);
    assert_eq!(report.file_cycles.len(), 1, "{report}");
    let cycle = &report.file_cycles[0];
    assert_eq!(cycle.members, ["src/m/inner.rs", "src/m/mod.rs"]);
    assert_eq!(
        cycle.cycle[0].sites,
        [site("src/m/inner.rs", 2, "crate::m::Config")]
    );
    assert_eq!(cycle.cycle[1].sites, [site("src/m/mod.rs", 6, "inner::go")]);
}

/// Scenario: a child imports its parent; the parent imports the child only under
/// `#[cfg(test)]`, in a `#[cfg(test)]` function, an inline `#[cfg(test)] mod tests`, and a
/// test module file `tests.rs` (which names both) with a child file of its own.
/// Guarantees: no cycle: test code makes no edge, and the test files are not read as library
/// files nor reported as unreached.
#[test]
fn cfg_test_import_does_not_count() {
    let report = check(&[
        ("src/lib.rs", "pub mod m;\n"),
        (
            "src/m/mod.rs",
            "mod inner;\n\n#[cfg(test)]\nuse inner::Helper;\n\npub struct C;\n\n\
             #[cfg(test)]\nfn helper() -> inner::Helper { inner::Helper }\n\n\
             #[cfg(test)]\nmod tests;\n\n#[cfg(test)]\nmod more {\n    use super::inner::Helper;\n}\n",
        ),
        ("src/m/inner.rs", "use super::C;\n\npub struct Helper(C);\n"),
        (
            "src/m/tests.rs",
            "use super::inner::Helper;\nuse super::C;\nmod fixtures;\n",
        ),
        ("src/m/tests/fixtures.rs", "use crate::m::inner::Helper;\n"),
    ]);
    assert!(report.is_acyclic(), "{report}");
    assert_eq!(
        report.test_files,
        BTreeSet::from([
            "src/m/tests.rs".to_owned(),
            "src/m/tests/fixtures.rs".to_owned()
        ])
    );
    assert!(!report.files.contains_key("src/m/tests.rs"));
    assert!(report.unreached.is_empty(), "{report}");
    let edges: Vec<&(String, String)> = report.file_edges.keys().collect();
    assert_eq!(
        edges,
        [&("src/m/inner.rs".to_owned(), "src/m/mod.rs".to_owned())]
    );
}

/// Scenario: `a/x.rs` names `crate::b::y::Thing`, and `b/z.rs` names `crate::a::x::AThing`:
/// no file cycle, but `a` and `b` depend on each other.
/// Guarantees: no file cycle; one top-level cycle `a -> b -> a` whose edges carry the
/// nested files and lines that make them.
#[test]
fn top_level_cycle_through_nested_files_is_found() {
    let report = check(&[
        ("src/lib.rs", "pub mod a;\npub mod b;\n"),
        ("src/a/mod.rs", "pub mod x;\n"),
        (
            "src/a/x.rs",
            "use crate::b::y::Thing;\n\npub struct AThing(pub Thing);\n",
        ),
        ("src/b/mod.rs", "pub mod y;\nmod z;\n"),
        ("src/b/y.rs", "pub struct Thing;\n"),
        (
            "src/b/z.rs",
            "pub fn make() -> crate::a::x::AThing {\n    todo!()\n}\n",
        ),
    ]);
    assert!(report.file_cycles.is_empty(), "{report}");
    assert_eq!(report.module_cycles.len(), 1, "{report}");
    let cycle = &report.module_cycles[0];
    assert_eq!(cycle.members, ["a", "b"]);
    assert_eq!(
        (cycle.cycle[0].from.as_str(), cycle.cycle[0].to.as_str()),
        ("a", "b")
    );
    assert_eq!(
        cycle.cycle[0].sites,
        [
            site("src/a/x.rs", 1, "crate::b::y::Thing"),
            site("src/a/x.rs", 3, "Thing"),
        ]
    );
    assert_eq!(
        cycle.cycle[1].sites,
        [site("src/b/z.rs", 1, "crate::a::x::AThing")]
    );
    assert!(cycle.other_edges.is_empty());
}

/// Scenario: paths the checker must see or must not be fooled by: a path inside a macro call,
/// identifiers inside strings, comments, char literals and raw strings, and `pub(super)`.
/// Guarantees: the macro path makes an edge at its own line; the rest make none.
#[test]
fn macro_paths_count_and_literals_do_not() {
    let report = check(&[
        ("src/lib.rs", "pub mod m;\n"),
        ("src/m/mod.rs", "mod inner;\nmod other;\n\npub struct C;\n"),
        (
            "src/m/inner.rs",
            "// super::C in a comment\n/* nested /* super::C */ */\npub(super) fn f(s: &'static str) -> char {\n\
             let _ = \"super::C\";\n    let _ = r#\"super::C \"quoted\" \"#;\n    let _ = b'\\'';\n\
             assert!(s.is_empty(), \"{}\", s);\n    vec![super::other::D].len();\n    'x'\n}\n",
        ),
        ("src/m/other.rs", "pub struct D;\n"),
    ]);
    let edges: Vec<(&str, &str)> = report
        .file_edges
        .keys()
        .map(|(from, to)| (from.as_str(), to.as_str()))
        .collect();
    assert_eq!(edges, [("src/m/inner.rs", "src/m/other.rs")], "{report}");
    assert_eq!(
        report.file_edges[&("src/m/inner.rs".to_owned(), "src/m/other.rs".to_owned())],
        [site("src/m/inner.rs", 8, "super::other::D")]
    );
}

/// Scenario: a module whose file is given by `#[path]`, in a directory the default lookup
/// would not find, names its parent; the parent names it back.
/// Guarantees: the file maps to the module path of its `mod` declaration and the cycle
/// through it is found.
#[test]
fn path_attribute_is_followed() {
    let report = check(&[
        ("src/lib.rs", "pub mod m;\n"),
        (
            "src/m/mod.rs",
            "#[path = \"impls/odd_name.rs\"]\nmod backend;\n\npub struct Handle(backend::Inner);\n",
        ),
        (
            "src/m/impls/odd_name.rs",
            "pub struct Inner(super::Handle);\n",
        ),
    ]);
    assert_eq!(report.files["src/m/impls/odd_name.rs"], "crate::m::backend");
    assert!(report.unreached.is_empty(), "{report}");
    assert_eq!(report.file_cycles.len(), 1, "{report}");
    assert_eq!(
        report.file_cycles[0].members,
        ["src/m/impls/odd_name.rs", "src/m/mod.rs"]
    );
}

/// Scenario: a facade `mod.rs` re-exports its children's items by globs (`pub use types::*;`,
/// then `pub use extra::*;`) and uses a sibling `ids.rs`, which imports `super::Thing` and
/// names `super::Other`, defined in `types.rs` and `extra.rs`.
/// Guarantees: no cycle: the sibling's paths are edges to the files that define the items,
/// `Other` through the first glob that provides it; the facade keeps its edges to the
/// children it re-exports from and uses.
#[test]
fn glob_reexport_through_facade_is_acyclic() {
    let report = check(&[
        ("src/lib.rs", "pub mod c;\n"),
        (
            "src/c/mod.rs",
            "mod extra;\nmod ids;\nmod types;\n\npub use types::*;\npub use extra::*;\n\n\
             use ids::Id;\n\npub fn load() -> Id {\n    todo!()\n}\n",
        ),
        ("src/c/types.rs", "pub struct Thing;\n"),
        ("src/c/extra.rs", "pub struct Other;\n"),
        (
            "src/c/ids.rs",
            "use super::Thing;\n\npub struct Id(Thing);\n\npub fn other() -> super::Other {\n    \
             todo!()\n}\n",
        ),
    ]);
    assert!(report.is_acyclic(), "{report}");
    assert_eq!(
        edge_pairs(&report),
        [
            ("src/c/ids.rs", "src/c/extra.rs"),
            ("src/c/ids.rs", "src/c/types.rs"),
            ("src/c/mod.rs", "src/c/extra.rs"),
            ("src/c/mod.rs", "src/c/ids.rs"),
            ("src/c/mod.rs", "src/c/types.rs"),
        ],
        "{report}"
    );
    assert_eq!(
        report.file_edges[&("src/c/ids.rs".to_owned(), "src/c/types.rs".to_owned())],
        [
            site("src/c/ids.rs", 1, "super::Thing"),
            site("src/c/ids.rs", 3, "Thing"),
        ]
    );
    assert_eq!(
        report.file_edges[&("src/c/ids.rs".to_owned(), "src/c/extra.rs".to_owned())],
        [site("src/c/ids.rs", 5, "super::Other")]
    );
    assert_eq!(
        report.file_edges[&("src/c/mod.rs".to_owned(), "src/c/types.rs".to_owned())],
        [site("src/c/mod.rs", 5, "types::*")]
    );
}

/// Scenario: a facade re-exports explicitly (`pub use child::{Thing, Other as Renamed};`) and
/// imports `child::Hidden` with a plain `use`; its child `user.rs`, which the facade uses,
/// names all three through `super::`; a module outside the facade names
/// `crate::p::Hidden`, which rustc would reject.
/// Guarantees: no cycle: the child's paths are edges to `child.rs`, the renamed item and the
/// plain import included (a descendant sees a plain `use`); the outside module's path is an
/// edge to the facade, since a plain `use` is no re-export for it.
#[test]
fn explicit_reexport_through_facade_is_followed() {
    let report = check(&[
        ("src/lib.rs", "pub mod p;\npub mod q;\n"),
        (
            "src/p/mod.rs",
            "mod child;\nmod user;\n\npub use child::{Other as Renamed, Thing};\n\
             use child::Hidden;\nuse user::User;\n\npub fn make(_: Hidden) -> User {\n    \
             todo!()\n}\n",
        ),
        (
            "src/p/child.rs",
            "pub struct Thing;\npub struct Other;\npub struct Hidden;\n",
        ),
        (
            "src/p/user.rs",
            "pub struct User(super::Thing, super::Renamed);\n\npub fn hide(_: super::Hidden) \
             {}\n",
        ),
        ("src/q.rs", "pub fn peek(_: crate::p::Hidden) {}\n"),
    ]);
    assert!(report.is_acyclic(), "{report}");
    assert_eq!(
        edge_pairs(&report),
        [
            ("src/p/mod.rs", "src/p/child.rs"),
            ("src/p/mod.rs", "src/p/user.rs"),
            ("src/p/user.rs", "src/p/child.rs"),
            ("src/q.rs", "src/p/mod.rs"),
        ],
        "{report}"
    );
    assert_eq!(
        report.file_edges[&("src/p/user.rs".to_owned(), "src/p/child.rs".to_owned())],
        [
            site("src/p/user.rs", 1, "super::Renamed"),
            site("src/p/user.rs", 1, "super::Thing"),
            site("src/p/user.rs", 3, "super::Hidden"),
        ]
    );
    assert_eq!(
        report.file_edges[&("src/q.rs".to_owned(), "src/p/mod.rs".to_owned())],
        [site("src/q.rs", 1, "crate::p::Hidden")]
    );
}

/// Scenario: `a.rs` defines `A` and names `super::B`; `b.rs` defines `B` and imports
/// `super::A`; the facade `mod.rs` re-exports both (`pub use a::A; pub use b::B;`).
/// Guarantees: the cycle `a.rs <-> b.rs` is found through the re-exports, with the file:line
/// of each edge; the facade is not part of it.
#[test]
fn cycle_through_reexports_is_found() {
    let report = check(&[
        ("src/lib.rs", "pub mod m;\n"),
        (
            "src/m/mod.rs",
            "mod a;\nmod b;\n\npub use a::A;\npub use b::B;\n",
        ),
        (
            "src/m/a.rs",
            "pub struct A;\n\npub fn make_b() -> super::B {\n    todo!()\n}\n",
        ),
        ("src/m/b.rs", "use super::A;\n\npub struct B(pub A);\n"),
    ]);
    assert_eq!(report.file_cycles.len(), 1, "{report}");
    let cycle = &report.file_cycles[0];
    assert_eq!(cycle.members, ["src/m/a.rs", "src/m/b.rs"]);
    assert_eq!(
        (cycle.cycle[0].from.as_str(), cycle.cycle[0].to.as_str()),
        ("src/m/a.rs", "src/m/b.rs")
    );
    assert_eq!(cycle.cycle[0].sites, [site("src/m/a.rs", 3, "super::B")]);
    assert_eq!(
        cycle.cycle[1].sites,
        [
            site("src/m/b.rs", 1, "super::A"),
            site("src/m/b.rs", 3, "A")
        ]
    );
    assert!(cycle.other_edges.is_empty());
    assert!(report.module_cycles.is_empty(), "{report}");
}

/// Scenario: a facade re-exports its child by a glob and declares `Local` itself; the child
/// names `super::Local`, `super::Missing` (declared nowhere) and `super::Duration` (which the
/// facade re-exports from `std`).
/// Guarantees: `Local` and `Missing` are edges to the facade, which makes a real cycle with
/// the facade's glob re-export; `Duration` is no edge.
#[test]
fn name_declared_in_facade_is_an_edge_to_it() {
    let report = check(&[
        ("src/lib.rs", "pub mod f;\n"),
        (
            "src/f/mod.rs",
            "mod child;\n\npub use child::*;\npub use std::time::Duration;\n\npub struct Local;\n",
        ),
        (
            "src/f/child.rs",
            "pub struct Thing(pub super::Local, pub super::Duration);\n\n\
             pub fn odd() -> super::Missing {\n    todo!()\n}\n",
        ),
    ]);
    assert_eq!(report.file_cycles.len(), 1, "{report}");
    assert_eq!(
        report.file_cycles[0].members,
        ["src/f/child.rs", "src/f/mod.rs"]
    );
    assert_eq!(
        report.file_edges[&("src/f/child.rs".to_owned(), "src/f/mod.rs".to_owned())],
        [
            site("src/f/child.rs", 1, "super::Local"),
            site("src/f/child.rs", 3, "super::Missing"),
        ]
    );
    assert_eq!(
        report.file_edges[&("src/f/mod.rs".to_owned(), "src/f/child.rs".to_owned())],
        [site("src/f/mod.rs", 3, "child::*")]
    );
    assert_eq!(report.file_edges.len(), 2, "{report}");
}
