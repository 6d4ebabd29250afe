//! The sandbox's env file: `KEY=VALUE` entries every command and every new session starts
//! with, under the variables the request sets. Its path reaches commands as `$EXECD_ENVS`,
//! which is how the SDKs' `commands.set_env` persists a variable: a command appending
//! `KEY='value'` (or `KEY="escaped"` when the value holds a single quote) to that file.
//!
//! Values are taken literally: `$NAME` in a value stays as written, nothing is expanded.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::http::ApiError;

/// The variable that names the file to commands, and that may name it to the service.
const VARIABLE: &str = "EXECD_ENVS";
/// Larger than any environment a process could start with.
const MAX_BYTES: u64 = 1 << 20;

pub struct EnvFile {
    path: PathBuf,
}

impl EnvFile {
    /// The file the service's own environment names (an absolute path), else `envs` in its state directory.
    pub fn new(state_dir: &Path) -> Self {
        let path = std::env::var_os(VARIABLE).map(PathBuf::from).filter(|p| p.is_absolute()).unwrap_or_else(|| state_dir.join("envs"));
        EnvFile { path }
    }

    /// Gives `cmd` the file's path and its entries; the request's own variables are set after, over them.
    pub fn apply(&self, cmd: &mut tokio::process::Command) -> Result<(), ApiError> {
        let entries = self.entries()?;
        cmd.env(VARIABLE, &self.path);
        cmd.envs(entries);
        Ok(())
    }

    fn entries(&self) -> Result<Vec<(String, String)>, ApiError> {
        let broken = |what: String| ApiError::runtime(format!("env file {} ({VARIABLE}): {what}; correct or remove it through the files API", self.path.display()));
        let file = match std::fs::File::open(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(broken(e.to_string())),
            Ok(file) => file,
        };
        // One byte past the bound tells a file too large, without reading the rest of it.
        let mut text = Vec::new();
        file.take(MAX_BYTES + 1).read_to_end(&mut text).map_err(|e| broken(e.to_string()))?;
        if text.len() as u64 > MAX_BYTES {
            return Err(broken(format!("more than the {MAX_BYTES} bytes read")));
        }
        parse(&String::from_utf8_lossy(&text)).map_err(broken)
    }
}

/// A shell variable's name: a letter or `_`, then letters, digits and `_`.
pub fn is_variable_name(name: &str) -> bool {
    name.starts_with(|c: char| c == '_' || c.is_ascii_alphabetic()) && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// The entries of an env file in order (a later one of a name wins when they are applied).
/// Blank lines and `#` comments are skipped; `export ` before a name is allowed. A value is
/// `'literal'`, `"escaped"` (`\\ \" \n \r \t`; any other backslash stays) or bare to the end of
/// its line; quoted ones may span lines.
fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut entries = Vec::new();
    let mut rest = text;
    let mut line = 1;
    loop {
        rest = rest.trim_start_matches(|c: char| c == ' ' || c == '\t');
        let Some(first) = rest.chars().next() else { return Ok(entries) };
        if first == '\n' || first == '\r' || first == '#' {
            let end = rest.find('\n').map_or(rest.len(), |i| i + 1);
            rest = &rest[end..];
            line += 1;
            continue;
        }
        let at = line;
        let entry = rest.strip_prefix("export ").unwrap_or(rest);
        let eq = entry.find('=').filter(|&i| !entry[..i].contains('\n')).ok_or_else(|| format!("line {at}: not NAME=VALUE"))?;
        let name = entry[..eq].trim_end();
        if !is_variable_name(name) {
            return Err(format!("line {at}: '{name}' is not a variable name"));
        }
        let (value, after) = value(&entry[eq + 1..]).map_err(|what| format!("line {at}: {what}"))?;
        line += entry[..entry.len() - after.len()].matches('\n').count();
        entries.push((name.to_string(), value));
        rest = after;
    }
}

/// One value and what follows it (from its line's end on).
fn value(text: &str) -> Result<(String, &str), String> {
    let line_end = |s: &str| s.find('\n').map_or(s.len(), |i| i + 1);
    let (value, after) = match text.chars().next() {
        Some('\'') => {
            let close = text[1..].find('\'').ok_or("a single-quoted value is not closed")?;
            (text[1..=close].to_string(), &text[close + 2..])
        }
        Some('"') => {
            let mut value = String::new();
            let mut chars = text[1..].char_indices();
            let close = loop {
                match chars.next().ok_or("a double-quoted value is not closed")? {
                    (i, '"') => break i + 2,
                    (_, '\\') => match chars.next().ok_or("a double-quoted value is not closed")?.1 {
                        'n' => value.push('\n'),
                        'r' => value.push('\r'),
                        't' => value.push('\t'),
                        c @ ('\\' | '"') => value.push(c),
                        c => value.extend(['\\', c]),
                    },
                    (_, c) => value.push(c),
                }
            };
            (value, &text[close..])
        }
        _ => {
            let end = line_end(text);
            return Ok((text[..end].trim().to_string(), &text[end..]));
        }
    };
    let tail = &after[..line_end(after)];
    if !tail.trim().is_empty() && !tail.trim_start().starts_with('#') {
        return Err(format!("'{}' after the closing quote", tail.trim()));
    }
    Ok((value, &after[tail.len()..]))
}

#[cfg(test)]
mod tests {
    use super::parse;

    fn pairs(text: &str) -> Vec<(String, String)> {
        parse(text).unwrap()
    }

    #[test]
    fn the_forms_set_env_writes_read_back_literally() {
        let text = "A='it is $HOME'\nB=\"it's \\\"quoted\\\"\\nnext\\ttab \\\\ \\q\"\nC='two\nlines'\n";
        assert_eq!(
            pairs(text),
            [("A", "it is $HOME"), ("B", "it's \"quoted\"\nnext\ttab \\ \\q"), ("C", "two\nlines")].map(|(k, v)| (k.to_string(), v.to_string()))
        );
    }

    #[test]
    fn comments_blanks_export_and_bare_values() {
        let text = "# set by hand\n\n  export PATH=/opt/bin:/usr/bin  \nEMPTY=\nX='y' # why\r\nLAST=1";
        assert_eq!(pairs(text), [("PATH", "/opt/bin:/usr/bin"), ("EMPTY", ""), ("X", "y"), ("LAST", "1")].map(|(k, v)| (k.to_string(), v.to_string())));
    }

    #[test]
    fn a_broken_entry_is_named_by_its_line() {
        assert_eq!(parse("A=1\nB='x\ny'\nnot an entry\n").unwrap_err(), "line 4: not NAME=VALUE");
        assert_eq!(parse("A=1\n1X=2\n").unwrap_err(), "line 2: '1X' is not a variable name");
        assert_eq!(parse("A='open\n").unwrap_err(), "line 1: a single-quoted value is not closed");
        assert_eq!(parse("A=\"x\" y\n").unwrap_err(), "line 1: 'y' after the closing quote");
    }
}
