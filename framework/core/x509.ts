/**
 * X.509 certificates for a cluster's mutual TLS, made with node:crypto alone: ECDSA P-256 keys,
 * and certificates encoded here in DER (RFC 5280) and signed with the CA's key. Node can parse and
 * verify certificates but not make them; the few structures a CA and its node and client
 * certificates need are small enough to write out rather than add a dependency for.
 */
import { X509Certificate, createHash, createPrivateKey, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';
import { isIPv4, isIPv6 } from 'node:net';

// ---- DER ----

function length(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

function tlv(tag: number, ...content: Buffer[]): Buffer {
  const body = Buffer.concat(content);
  return Buffer.concat([Buffer.from([tag]), length(body.length), body]);
}

const sequence = (...items: Buffer[]): Buffer => tlv(0x30, ...items);
const set = (...items: Buffer[]): Buffer => tlv(0x31, ...items);
const octets = (bytes: Buffer): Buffer => tlv(0x04, bytes);
const utf8 = (text: string): Buffer => tlv(0x0c, Buffer.from(text, 'utf8'));
const boolean = (value: boolean): Buffer => tlv(0x01, Buffer.from([value ? 0xff : 0x00]));
/** [n] EXPLICIT */
const explicit = (n: number, content: Buffer): Buffer => tlv(0xa0 + n, content);
/** A BIT STRING of whole bytes. */
const bits = (bytes: Buffer, unusedBits = 0): Buffer => tlv(0x03, Buffer.from([unusedBits]), bytes);

/** A non-negative INTEGER from big-endian bytes (a leading 0x00 keeps it positive). */
function integer(bytes: Buffer): Buffer {
  let start = 0;
  while (start < bytes.length - 1 && bytes[start] === 0) start++;
  const trimmed = bytes.subarray(start);
  return tlv(0x02, trimmed[0]! & 0x80 ? Buffer.concat([Buffer.from([0]), trimmed]) : trimmed);
}

function oid(dotted: string): Buffer {
  const [first, second, ...rest] = dotted.split('.').map(Number);
  const out = [first! * 40 + second!];
  for (const arc of rest) {
    const groups = [arc & 0x7f];
    for (let v = Math.floor(arc / 128); v > 0; v = Math.floor(v / 128)) groups.unshift(0x80 | (v & 0x7f));
    out.push(...groups);
  }
  return tlv(0x06, Buffer.from(out));
}

/** UTCTime up to 2049, GeneralizedTime from 2050 on (RFC 5280 4.1.2.5). */
function time(date: Date): Buffer {
  const iso = date.toISOString().replace(/[-:T]/g, '').slice(0, 14);
  return date.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(`${iso.slice(2)}Z`)) : tlv(0x18, Buffer.from(`${iso}Z`));
}

// ---- certificates ----

const OID = {
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  commonName: '2.5.4.3',
  organization: '2.5.4.10',
  subjectKeyIdentifier: '2.5.29.14',
  keyUsage: '2.5.29.15',
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
  authorityKeyIdentifier: '2.5.29.35',
  extKeyUsage: '2.5.29.37',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  clientAuth: '1.3.6.1.5.5.7.3.2',
} as const;

/** The extended key usages of a node certificate; a client certificate has only clientAuth. */
export const SERVER_AUTH = OID.serverAuth;

/** The URI in a certificate's subjectAltName that names the cluster it belongs to. */
export const CLUSTER_URI_PREFIX = 'urn:actorctl:cluster:';

export type CertificateKind = 'ca' | 'node' | 'client';

export interface CertificateRequest {
  kind: CertificateKind;
  /** The subject's common name: the CA's title, a node's or a client's name. */
  name: string;
  /** Node and client certificates: the cluster they belong to (a subjectAltName URI). */
  cluster?: string;
  /** Node certificates: the DNS names and IP addresses it is reached at (subjectAltName). */
  hosts?: string[];
  days: number;
}

export interface Issuer {
  cert: X509Certificate;
  key: KeyObject;
}

export interface IssuedCertificate {
  /** PEM of the certificate. */
  cert: string;
  /** PEM (PKCS #8) of its new private key. */
  key: string;
}

function extension(id: string, critical: boolean, value: Buffer): Buffer {
  return sequence(oid(id), ...(critical ? [boolean(true)] : []), octets(value));
}

/** The subjectAltName entries: DNS names [2], IP addresses [7] and the cluster URI [6]. */
function altNames(hosts: readonly string[], cluster: string | undefined): Buffer {
  const names = hosts.map((host) => {
    if (isIPv4(host)) return tlv(0x87, Buffer.from(host.split('.').map(Number)));
    if (isIPv6(host)) return tlv(0x87, ipv6Bytes(host));
    return tlv(0x82, Buffer.from(host, 'ascii'));
  });
  if (cluster !== undefined) names.push(tlv(0x86, Buffer.from(`${CLUSTER_URI_PREFIX}${cluster}`, 'ascii')));
  return sequence(...names);
}

function ipv6Bytes(host: string): Buffer {
  const [head = '', tail] = host.split('::');
  const groups = (part: string): number[] => (part ? part.split(':').map((g) => parseInt(g, 16)) : []);
  const left = groups(head);
  const right = tail === undefined ? [] : groups(tail);
  const all = [...left, ...Array(8 - left.length - right.length).fill(0), ...right];
  const out = Buffer.alloc(16);
  all.forEach((g, i) => out.writeUInt16BE(g, i * 2));
  return out;
}

/** The key identifier of a public key: SHA-1 of its subjectPublicKey bits (RFC 5280 4.2.1.2, method 1). */
function keyId(publicKey: KeyObject): Buffer {
  const spki = publicKey.export({ type: 'spki', format: 'der' });
  // An EC SubjectPublicKeyInfo ends with the BIT STRING of the point: its 65 bytes for P-256.
  return createHash('sha1').update(spki.subarray(spki.length - 65)).digest();
}

function name(commonName: string, organization: string): Buffer {
  return sequence(set(sequence(oid(OID.organization), utf8(organization))), set(sequence(oid(OID.commonName), utf8(commonName))));
}

const ORGANIZATION = 'actorctl';

/**
 * A new key pair and its certificate: self-signed for a CA, else signed by `issuer`. A CA may sign
 * certificates (and nothing else); a node's certificate serves and calls (serverAuth + clientAuth),
 * a client's only calls (clientAuth), so a client may read and call but never take part in membership.
 */
export function issueCertificate(request: CertificateRequest, issuer?: Issuer): IssuedCertificate {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const signingKey = issuer?.key ?? privateKey;
  const issuerKeyId = issuer ? keyId(issuer.cert.publicKey) : keyId(publicKey);
  const now = Date.now();
  // Backdated a little, so that a peer whose clock is slightly behind accepts it at once.
  const notBefore = new Date(now - 5 * 60_000);
  const notAfter = new Date(now + request.days * 86_400_000);
  const ca = request.kind === 'ca';
  const extensions = [
    extension(OID.basicConstraints, true, ca ? sequence(boolean(true), integer(Buffer.from([0]))) : sequence()),
    // keyCertSign + cRLSign for a CA (bits 5, 6), digitalSignature for the others (bit 0).
    extension(OID.keyUsage, true, ca ? bits(Buffer.from([0x06]), 1) : bits(Buffer.from([0x80]), 7)),
    extension(OID.subjectKeyIdentifier, false, octets(keyId(publicKey))),
    extension(OID.authorityKeyIdentifier, false, sequence(tlv(0x80, issuerKeyId))),
  ];
  if (!ca) {
    const usages = request.kind === 'node' ? [OID.serverAuth, OID.clientAuth] : [OID.clientAuth];
    extensions.push(extension(OID.extKeyUsage, false, sequence(...usages.map(oid))));
    extensions.push(extension(OID.subjectAltName, false, altNames(request.hosts ?? [], request.cluster)));
  }
  const algorithm = sequence(oid(OID.ecdsaWithSha256));
  const subject = name(request.name, ORGANIZATION);
  const tbs = sequence(
    explicit(0, integer(Buffer.from([2]))),
    integer(Buffer.concat([Buffer.from([0x01]), randomBytes(15)])),
    algorithm,
    issuer ? issuer.cert.raw.subarray(...subjectSpan(issuer.cert.raw)) : subject,
    sequence(time(notBefore), time(notAfter)),
    subject,
    publicKey.export({ type: 'spki', format: 'der' }),
    explicit(3, sequence(...extensions)),
  );
  const signature = sign('sha256', tbs, signingKey);
  const der = sequence(tbs, algorithm, bits(signature));
  return { cert: pem('CERTIFICATE', der), key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() };
}

/** Reads a CA key (PEM) for signing; the key stays in this process. */
export function signingKey(pemText: Buffer): KeyObject {
  return createPrivateKey(pemText);
}

function pem(label: string, der: Buffer): string {
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

/**
 * Where the subject Name lies in a certificate's DER, to copy it byte for byte as the issuer of the
 * certificates it signs (a path check compares the two names exactly).
 */
function subjectSpan(der: Buffer): [number, number] {
  const read = (at: number): { start: number; end: number; body: number } => {
    let n = der[at + 1]!;
    let body = at + 2;
    if (n & 0x80) {
      const count = n & 0x7f;
      n = 0;
      for (let i = 0; i < count; i++) n = n * 256 + der[at + 2 + i]!;
      body += count;
    }
    return { start: at, end: body + n, body };
  };
  const tbs = read(read(0).body);
  // tbsCertificate: [0] version, serialNumber, signature, issuer, validity, subject.
  let field = read(tbs.body);
  for (let i = 0; i < 5; i++) field = read(field.end);
  return [field.start, field.end];
}

/** The cluster a certificate names in its subjectAltName, if any. */
export function clusterOf(subjectAltName: string | undefined): string | undefined {
  for (const entry of (subjectAltName ?? '').split(', ')) {
    if (entry.startsWith(`URI:${CLUSTER_URI_PREFIX}`)) return entry.slice(`URI:${CLUSTER_URI_PREFIX}`.length);
  }
  return undefined;
}
