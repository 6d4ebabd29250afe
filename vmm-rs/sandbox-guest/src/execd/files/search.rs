//! Finding files by glob pattern below a directory (`GET /files/search`) and replacing text in
//! files (`POST /files/replace`).

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};

use hyper::body::Incoming;
use hyper::Request;
use serde::Deserialize;
use serde_json::{json, Value};

use super::info::file_info;
use super::{blocking, checked_path, io_error, open_regular};
use crate::http::{self, ApiError, ApiResult};

/// Shell-style glob: `*` and `?` stop at `/`, `**` crosses it, `[abc]`/`[a-z]`/`[!x]` classes.
fn glob_match(pattern: &[char], text: &[char]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some('*') if pattern.get(1) == Some(&'*') => {
            let rest = &pattern[2..];
            (0..=text.len()).any(|i| glob_match(rest, &text[i..]))
        }
        Some('*') => {
            let rest = &pattern[1..];
            for i in 0..=text.len() {
                if glob_match(rest, &text[i..]) {
                    return true;
                }
                if text.get(i) == Some(&'/') {
                    break;
                }
            }
            false
        }
        Some('?') => text.first().is_some_and(|c| *c != '/') && glob_match(&pattern[1..], &text[1..]),
        Some('[') => {
            let Some(close) = pattern.iter().skip(2).position(|c| *c == ']').map(|i| i + 2) else {
                return text.first() == Some(&'[') && glob_match(&pattern[1..], &text[1..]);
            };
            let Some(c) = text.first() else { return false };
            let mut class = &pattern[1..close];
            let negate = matches!(class.first(), Some('!') | Some('^'));
            if negate {
                class = &class[1..];
            }
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == '-' {
                    hit |= class[i] <= *c && *c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == *c;
                    i += 1;
                }
            }
            hit != negate && glob_match(&pattern[close + 1..], &text[1..])
        }
        Some(p) => text.first() == Some(p) && glob_match(&pattern[1..], &text[1..]),
    }
}

pub async fn search(req: Request<Incoming>) -> ApiResult {
    let pairs = http::query_pairs(&req);
    let root = checked_path(&http::require_query(&pairs, "path")?, "query 'path'")?;
    let pattern = http::query_one(&pairs, "pattern").filter(|p| !p.is_empty()).unwrap_or_else(|| "*".into());
    let found = blocking(move || {
        let meta = fs::metadata(&root).map_err(|e| io_error(&root, e))?;
        if !meta.is_dir() {
            return Err(ApiError::bad_request("INVALID_FILE", format!("{}: is not a directory", root.display())));
        }
        let pat: Vec<char> = pattern.chars().collect();
        // A pattern with a slash matches the path below the root, otherwise the file name.
        let by_path = pattern.contains('/');
        let mut out = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(ft) = entry.file_type() else { continue };
                if ft.is_dir() {
                    stack.push(path.clone());
                    continue;
                }
                let subject = if by_path {
                    path.strip_prefix(&root).unwrap_or(&path).to_string_lossy().into_owned()
                } else {
                    entry.file_name().to_string_lossy().into_owned()
                };
                if glob_match(&pat, &subject.chars().collect::<Vec<_>>()) {
                    if let Ok(info) = file_info(&path) {
                        out.push(info);
                    }
                }
            }
        }
        Ok(out)
    })
    .await?;
    Ok(http::json(&Value::Array(found)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplaceItem {
    old: String,
    new: String,
}

pub async fn replace(req: Request<Incoming>) -> ApiResult {
    let pairs = http::query_pairs(&req);
    let verbose = http::query_one(&pairs, "verbose").is_some_and(|v| v == "true" || v == "1");
    let map: BTreeMap<String, ReplaceItem> = http::read_json(req).await?;
    let counts = blocking(move || {
        let mut counts = serde_json::Map::new();
        for (raw, item) in map {
            let p = checked_path(&raw, "request key")?;
            if item.old.is_empty() {
                return Err(ApiError::bad_request("INVALID_REQUEST_BODY", format!("{raw}: field 'old' is empty")));
            }
            let mut bytes = Vec::new();
            open_regular(&p, false)?.read_to_end(&mut bytes).map_err(|e| io_error(&p, e))?;
            let text = String::from_utf8(bytes).map_err(|_| ApiError::bad_request("INVALID_FILE_CONTENT", format!("{raw}: not a UTF-8 text file")))?;
            let n = text.matches(&item.old).count();
            if n > 0 {
                // Opened again for writing, and checked again: the path may have changed.
                let mut file = open_regular(&p, true)?;
                file.set_len(0).and_then(|_| file.write_all(text.replace(&item.old, &item.new).as_bytes())).map_err(|e| io_error(&p, e))?;
            }
            counts.insert(raw, json!({"replacedCount": n}));
        }
        Ok(counts)
    })
    .await?;
    Ok(if verbose { http::json(&Value::Object(counts)) } else { http::ok_empty() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(p: &str, t: &str) -> bool {
        glob_match(&p.chars().collect::<Vec<_>>(), &t.chars().collect::<Vec<_>>())
    }

    #[test]
    fn globs() {
        assert!(g("*.py", "main.py"));
        assert!(!g("*.py", "main.pyc"));
        assert!(g("fil?.txt", "file.txt"));
        assert!(g("[a-c]x", "bx"));
        assert!(!g("[!a-c]x", "bx"));
        assert!(!g("*.py", "a/b.py"));
        assert!(g("**/*.py", "a/b/c.py"));
        assert!(g("データ*", "データ.csv"));
    }
}
