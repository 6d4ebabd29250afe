/**
 * Mutual TLS between the nodes of a cluster: the files a node (or a client such as inspect) is
 * given, checked when loaded, and the checks of a peer once its certificate has been verified
 * against the cluster CA. The CA is the trust boundary: any certificate it signed is trusted, so
 * peer addresses are not matched against host names (nodes dial addresses learnt from gossip).
 * A certificate that names a cluster (a subjectAltName URI, as `actorctl cert` writes) must name
 * this node's, so clusters may share one CA and still stay apart.
 */
import { X509Certificate, createPrivateKey, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { PeerCertificate, TLSSocket } from 'node:tls';
import { InvalidInputError, NotFoundError } from '../../lib/errors.js';
import { DEFAULT_CLUSTER, clusterNameProblem } from './members.js';
import { SERVER_AUTH, clusterOf } from './x509.js';

/** Where the PEM files are. */
export interface TlsFiles {
  /** The cluster CA's certificate: peers must present certificates it signed. */
  ca: string;
  /** This node's (or client's) certificate, signed by the CA. */
  cert: string;
  /** Its private key. */
  key: string;
}

/** The loaded files, ready for node:tls. */
export interface TlsMaterial {
  ca: Buffer;
  cert: Buffer;
  key: Buffer;
}

/** Reads the files and checks them: a readable CA certificate, a certificate it signed and still valid, and the key of that certificate. */
export function loadTls(files: TlsFiles, now = new Date()): TlsMaterial {
  const read = (what: keyof TlsFiles): Buffer => {
    try {
      return readFileSync(files[what]);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      const message = `TLS ${what} ${files[what]}: ${code === 'ENOENT' ? 'no such file' : (code ?? 'unreadable')}`;
      throw code === 'ENOENT' ? new NotFoundError(message) : new InvalidInputError(message);
    }
  };
  const material = { ca: read('ca'), cert: read('cert'), key: read('key') };
  const ca = parseCertificate(material.ca, `TLS ca ${files.ca}`);
  const cert = parseCertificate(material.cert, `TLS cert ${files.cert}`);
  let key: KeyObject;
  try {
    key = createPrivateKey(material.key);
  } catch {
    // The key's own text is never part of a message.
    throw new InvalidInputError(`TLS key ${files.key} is not a PEM private key`);
  }
  if (!ca.ca) throw new InvalidInputError(`TLS ca ${files.ca} is not a CA certificate`);
  if (!cert.verify(ca.publicKey)) throw new InvalidInputError(`TLS cert ${files.cert} is not signed by the CA ${files.ca}`);
  if (!cert.checkPrivateKey(key)) throw new InvalidInputError(`TLS key ${files.key} is not the key of the certificate ${files.cert}`);
  if (now < new Date(cert.validFrom) || now > new Date(cert.validTo)) {
    throw new InvalidInputError(`TLS cert ${files.cert} is valid from ${cert.validFrom} to ${cert.validTo}, not now`);
  }
  return material;
}

function parseCertificate(pem: Buffer, what: string): X509Certificate {
  try {
    return new X509Certificate(pem);
  } catch {
    throw new InvalidInputError(`${what} is not a PEM certificate`);
  }
}

/**
 * The cluster a node (or a client) belongs to: as given, else as its certificate names it, else
 * `default`. A certificate naming another cluster than the one given is refused.
 */
export function clusterOfNode(given: string | undefined, material: TlsMaterial | undefined): string {
  const certified = material ? clusterOf(new X509Certificate(material.cert).subjectAltName) : undefined;
  const name = given ?? certified ?? DEFAULT_CLUSTER;
  const problem = clusterNameProblem(name);
  if (problem) throw new InvalidInputError(problem);
  if (certified !== undefined && certified !== name) {
    throw new InvalidInputError(`the TLS certificate is for cluster '${certified}', but cluster '${name}' is configured`, { hint: 'use a certificate of this cluster, or configure its name' });
  }
  return name;
}

/** Why a verified peer may not talk to a node of `cluster`: its certificate names another cluster. */
export function peerClusterProblem(subjectAltName: string | undefined, cluster: string): string | undefined {
  const named = clusterOf(subjectAltName);
  return named === undefined || named === cluster ? undefined : `its certificate is for cluster '${named}', not '${cluster}'`;
}

/** A client's check of the node it connected to (node:tls checkServerIdentity): the CA verified it, only the cluster is left. */
export function serverIdentityCheck(cluster: string): (host: string, cert: PeerCertificate) => Error | undefined {
  return (host, cert) => {
    const problem = peerClusterProblem(cert.subjectaltname, cluster);
    return problem ? new Error(`${host}: ${problem}`) : undefined;
  };
}

/** Whether the peer of a TLS connection holds a node certificate (serverAuth), not only a client one. */
export function peerIsNode(socket: TLSSocket): boolean {
  const usages = socket.getPeerX509Certificate()?.keyUsage;
  // A certificate without extended key usages may be used for anything (RFC 5280 4.2.1.12).
  return usages === undefined || usages.includes(SERVER_AUTH);
}
