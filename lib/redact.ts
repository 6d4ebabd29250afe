/**
 * Credentials typed into URIs never reach a message: `s3://user:secret@bucket` is shown as
 * `s3://***@bucket`. Applied where a message quotes a URI, and once more where messages leave the
 * process (the error report, the logger), for any quoting a module forgot. Also what tells a
 * credential in a query by its parameter's name, for commands that refuse such URLs.
 */

// The authority's user info runs from `scheme://` to the last `@` before the host; a password typed
// raw may itself hold `@` or `:`, so the match is greedy up to the path, query, fragment or a quote.
// The dataset schemes count a slash or two short too (`s3:/user:secret@bucket`): messages quote such a typo.
const USER_INFO = /\b([a-z][a-z0-9+.-]*:\/\/|(?:s3|catalog):\/?)[^\s/?#"'`<>@]*(?:@[^\s/?#"'`<>@]*)*@/gi;

export function redactUserInfo(text: string): string {
  return text.includes('@') ? text.replace(USER_INFO, '$1***@') : text;
}

// Query parameters that carry credentials by name (Gemini's `key`, `api_key`, `access_token`, signed URLs' `sig`).
const CREDENTIAL_NAME = 'key|token|secret|password|auth|sig';
const QUERY_CREDENTIAL = new RegExp(`([?&][^=&#]*(?:${CREDENTIAL_NAME})[^=&#]*=)[^&#]*`, 'gi');
const CREDENTIAL_PARAMETER = new RegExp(CREDENTIAL_NAME, 'i');

/** A request target with the values of its credential-looking query parameters shown as `***`. */
export function redactQueryCredentials(target: string): string {
  return target.includes('?') ? target.replace(QUERY_CREDENTIAL, '$1***') : target;
}

/** The names (decoded, each once) of the query parameters of `url` that look like they carry a credential. */
export function credentialQueryParameters(url: URL): string[] {
  return [...new Set([...url.searchParams.keys()].filter((name) => CREDENTIAL_PARAMETER.test(name)))];
}
