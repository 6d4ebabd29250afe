/**
 * The headers every answer of a `serve` listener that answers JSON carries (the API, control, event
 * gateway and capture admin listeners): it is what its Content-Type says (JSON quoting a run's text,
 * or a 404 quoting the path asked for, is never sniffed as a page), and opened as a page or framed it
 * would run and show nothing. The web interface's routes set their own policy.
 */
export const ANSWER_HEADERS = { 'x-content-type-options': 'nosniff', 'content-security-policy': "default-src 'none'; frame-ancestors 'none'" };
