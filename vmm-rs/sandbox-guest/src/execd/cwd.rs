//! A command's `cwd` as the execution service API describes it: `$NAME` and `${NAME}` expanded
//! from the command's own environment (an unset one is the request's mistake), and a leading
//! `~` to the service user's home. Nothing else is interpreted: no `~user`, no `$(...)`.

/// `cwd` expanded; `lookup` gives a variable of the command's environment.
pub fn expand(cwd: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = cwd;
    if rest == "~" || rest.starts_with("~/") {
        out.push_str(&home().ok_or("'~': the service user has no home directory")?);
        rest = &rest[1..];
    }
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, next) = match after.strip_prefix('{') {
            Some(braced) => {
                let close = braced.find('}').ok_or("a '${' has no closing '}'")?;
                (&braced[..close], &braced[close + 1..])
            }
            None => {
                let len = after.find(|c: char| !(c == '_' || c.is_ascii_alphanumeric())).unwrap_or(after.len());
                (&after[..len], &after[len..])
            }
        };
        if name.is_empty() {
            // A `$` that starts no name is a character of the path.
            out.push('$');
            rest = after;
            continue;
        }
        if !super::env_file::is_variable_name(name) {
            return Err(format!("'{name}' is not a variable name"));
        }
        out.push_str(&lookup(name).ok_or_else(|| format!("${name} is not set in the command's environment"))?);
        rest = next;
    }
    out.push_str(rest);
    Ok(out)
}

fn home() -> Option<String> {
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        return Some(home.to_string_lossy().into_owned());
    }
    // SAFETY: getpwuid returns a pointer to static storage or null; read at once.
    let pw = unsafe { libc::getpwuid(libc::geteuid()) };
    if pw.is_null() {
        return None;
    }
    let dir = unsafe { std::ffi::CStr::from_ptr((*pw).pw_dir) };
    Some(dir.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::expand;

    fn env(name: &str) -> Option<String> {
        match name {
            "WORK" => Some("/srv/project".into()),
            "SUB" => Some("a b".into()),
            _ => None,
        }
    }

    #[test]
    fn variables_and_a_leading_tilde_expand() {
        assert_eq!(expand("$WORK/${SUB}/x", env).unwrap(), "/srv/project/a b/x");
        assert_eq!(expand("/plain/path", env).unwrap(), "/plain/path");
        assert_eq!(expand("/cost$/$", env).unwrap(), "/cost$/$");
        assert_eq!(expand("/a/~/b", env).unwrap(), "/a/~/b");
        assert_eq!(expand("~user", env).unwrap(), "~user");
        // Whatever the home of the user running the test is: `~` is that, followed by the rest as given.
        let home = super::home().expect("the test's user has a home directory");
        assert_eq!(expand("~", env).unwrap(), home);
        assert_eq!(expand("~/$WORK", env).unwrap(), format!("{home}//srv/project"));
    }

    #[test]
    fn an_unset_or_malformed_variable_is_refused() {
        assert_eq!(expand("$NOPE/x", env).unwrap_err(), "$NOPE is not set in the command's environment");
        assert_eq!(expand("${WORK", env).unwrap_err(), "a '${' has no closing '}'");
        assert_eq!(expand("${1X}", env).unwrap_err(), "'1X' is not a variable name");
    }
}
