/**
 * `actorctl cert`: a cluster CA and the node and client certificates it signs, as PEM files. The
 * CA's key is written once, mode 0600, and only ever read back (in this process) to sign: it never
 * leaves its file. Every key file is mode 0600. Files are written crash-safely, and an existing file
 * is replaced only when asked (`force`).
 */
import { X509Certificate } from 'node:crypto';
import { existsSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { DurableFile } from '../../lib/durable.js';
import { ConflictError, InvalidInputError, NotFoundError } from '../../lib/errors.js';
import { clusterNameProblem } from './members.js';
import { issueCertificate, signingKey, type CertificateKind } from './x509.js';

export const CA_CERT = 'ca.crt';
export const CA_KEY = 'ca.key';

export interface CertificateFiles {
  cert: string;
  key: string;
  /** Problems the user should hear of (a CA key others can read). */
  warnings: string[];
}

export interface CaRequest {
  dir: string;
  days: number;
  force: boolean;
}

export interface LeafRequest {
  kind: Exclude<CertificateKind, 'ca'>;
  /** The subject's name, and the files' (`<name>.crt`, `<name>.key`). */
  name: string;
  cluster: string;
  /** Node certificates: DNS names and IP addresses. */
  hosts: string[];
  /** Where the CA is. */
  dir: string;
  /** Where the new files go. */
  out: string;
  days: number;
  force: boolean;
}

const FILE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

export function createCa(request: CaRequest): CertificateFiles {
  const files = { cert: join(request.dir, CA_CERT), key: join(request.dir, CA_KEY) };
  refuseExisting(files, request.force, 'every certificate the old CA signed stops being trusted');
  const issued = issueCertificate({ kind: 'ca', name: 'actorctl cluster CA', days: request.days });
  writePair(files, issued);
  return { ...files, warnings: [] };
}

export function createLeaf(request: LeafRequest): CertificateFiles {
  if (!FILE_NAME.test(request.name) || request.name === 'ca') throw new InvalidInputError(`certificate name '${request.name}' must be 1-63 of A-Z a-z 0-9 . _ - and not 'ca'`);
  const problem = clusterNameProblem(request.cluster);
  if (problem) throw new InvalidInputError(problem);
  const caFiles = { cert: join(request.dir, CA_CERT), key: join(request.dir, CA_KEY) };
  for (const file of [caFiles.cert, caFiles.key]) {
    if (!existsSync(file)) throw new NotFoundError(`no CA at ${request.dir}: ${file} does not exist`, { hint: `make one with \`actorctl cert ca --dir ${request.dir}\`` });
  }
  const warnings: string[] = [];
  const mode = statSync(caFiles.key).mode & 0o777;
  if (mode & 0o077) warnings.push(`${caFiles.key} is readable by others (mode ${mode.toString(8)}); run: chmod 600 ${caFiles.key}`);
  let issuer;
  try {
    issuer = { cert: new X509Certificate(readFileSync(caFiles.cert)), key: signingKey(readFileSync(caFiles.key)) };
  } catch {
    // Neither file's content is ever part of a message.
    throw new InvalidInputError(`${caFiles.cert} and ${caFiles.key} are not a PEM certificate and its private key`);
  }
  if (!issuer.cert.ca || !issuer.cert.checkPrivateKey(issuer.key)) throw new InvalidInputError(`${caFiles.cert} is not a CA certificate whose key is ${caFiles.key}`);
  const files = { cert: join(request.out, `${request.name}.crt`), key: join(request.out, `${request.name}.key`) };
  refuseExisting(files, request.force, 'the old certificate stays valid until it expires');
  const issued = issueCertificate({ kind: request.kind, name: request.name, cluster: request.cluster, hosts: request.hosts, days: request.days }, issuer);
  writePair(files, issued);
  return { ...files, warnings };
}

function refuseExisting(files: { cert: string; key: string }, force: boolean, consequence: string): void {
  const existing = [files.cert, files.key].filter((f) => existsSync(f));
  if (existing.length && !force) throw new ConflictError(`${existing.join(' and ')} already exist${existing.length === 1 ? 's' : ''}`, { hint: `--force replaces them (${consequence})` });
}

/** The key (0600) and the certificate (0644), each renamed into place only once both are written. */
function writePair(files: { cert: string; key: string }, issued: { cert: string; key: string }): void {
  const key = new DurableFile(files.key, { mode: 0o600, createDirectory: true });
  const cert = new DurableFile(files.cert, { mode: 0o644 });
  try {
    key.write(issued.key);
    cert.write(issued.cert);
    key.commit();
  } catch (error) {
    key.abort();
    cert.abort();
    throw error;
  }
  try {
    cert.commit();
  } catch (error) {
    // A key without its certificate is of no use: take it back rather than leave half a pair.
    rmSync(files.key, { force: true });
    throw error;
  }
}
