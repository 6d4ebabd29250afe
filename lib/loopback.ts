/**
 * Whether a host, as written in an address, is this machine only: 127.0.0.0/8, ::1 (any spelling,
 * IPv4-mapped 127.x included) or `localhost`. Decided on the text, never by resolving a name: what
 * a name resolves to may change between the check and its use. node:net is not loaded for it (the
 * tools check their listener flags at start-up).
 */

/** A dotted-quad IPv4 address, as node:net's isIP accepts it. */
const IPV4 = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

/** The canonical text of an IPv6 address (the WHATWG URL parser checks and compresses it), or undefined. */
function canonicalIpv6(host: string): string | undefined {
  if (!host.includes(':') || host.includes('%')) return undefined;
  try {
    return new URL(`http://[${host}]/`).hostname.slice(1, -1);
  } catch {
    return undefined;
  }
}

export function isLoopbackHost(host: string): boolean {
  if (host.toLowerCase() === 'localhost') return true;
  if (IPV4.test(host)) return host.split('.')[0] === '127';
  const v6 = canonicalIpv6(host);
  // The URL parser writes an IPv4-mapped address in hex: ::ffff:127.0.0.1 is ::ffff:7f00:1.
  return v6 !== undefined && (v6 === '::1' || /^::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}$/.test(v6));
}

/**
 * Whether a request's Host header names this machine: a loopback address or `localhost`, with any
 * port. A loopback listener is still reachable from a web page through DNS rebinding (a name the
 * page's server controls, re-pointed at 127.0.0.1), and the browser then sends that name as Host;
 * refusing it keeps other sites' pages from using what the listener serves.
 * A request without Host (HTTP/1.0) cannot come from a browser and is let through.
 */
export function isLoopbackHostHeader(header: string | undefined): boolean {
  if (header === undefined) return true;
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+))(?::\d{1,5})?$/.exec(header);
  if (!m) return false;
  return isLoopbackHost(m[1] ?? m[2] ?? '');
}

/**
 * Whether a request's Origin header is a page served from this machine: http(s) on a loopback
 * address or `localhost`, any port. `null` (a sandboxed or file: page) and anything unparsable are not.
 */
export function isLoopbackOrigin(origin: string): boolean {
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  return (url.protocol === 'http:' || url.protocol === 'https:') && isLoopbackHostHeader(url.host);
}

/**
 * Why a request may come from another site's page in the user's browser, or undefined. Such a page
 * reaches loopback with its own Origin (`null` from a sandboxed or file: page); `Sec-Fetch-Site`
 * says so in the browsers that send it, also for a page of this machine on another port
 * (`same-site`). A program that is not a browser sends neither.
 */
export function crossSite(headers: { origin?: string | undefined; 'sec-fetch-site'?: string | string[] | undefined }): string | undefined {
  const site = headers['sec-fetch-site'];
  if (site === 'cross-site' || site === 'same-site') return `Sec-Fetch-Site is ${site}`;
  const origin = headers.origin;
  if (origin !== undefined && !isLoopbackOrigin(origin)) return `Origin ${JSON.stringify(origin.slice(0, 200))} is not a page of this machine`;
  return undefined;
}
