/**
 * trajstore's engine: the one module the command line (and anything else outside `pipelines/`)
 * imports. Constants and types are exported as they are; each operation loads its implementation
 * on first use, so that loading the tool (for --help, or another command) costs nothing of the
 * operations it does not run. The operations load in three groups: pins (pins/manage.ts), reading
 * (reading.ts: list, stats, find, query, show) and writing (writing.ts: import, export, drop).
 *
 * Operations take typed arguments and return results (rows, summaries, documents); they never
 * parse flags or render. A DATASET argument is a path, a pin (`@name[/sub]`) or undefined for the
 * default dataset, resolved against a ResolveContext (the configuration file and the environment).
 */
import type { ProgressFactory } from '../lib/progress.js';
import type { DropOptions, DropTarget } from './drop/index.js';
import type { ExportOptions, ExportSummary } from './export/export.js';
import type { ImportSummary } from './import/import.js';
import type { ImportPlan, ImportRequest } from './import/plan.js';
import type { ImportIO } from './import/thread/client.js';
import type { ListIO, SourceListing } from './list/index.js';
import type { PinDetails, PinListing, PinRequest } from './pins/manage.js';
import type { Pin } from './pins/pins.js';
import type { ResolveContext } from './pins/resolve.js';
import type { FindDocument, FindRequest } from './search/find.js';
import type { QueryOutcome, QueryRequest } from './search/query.js';
import type { ShowRequest, Transcript } from './show/transcript.js';
import type { IssuedUser, LibraryListing, LibraryRequest } from './catalog/manage.js';
import type { AgentEnd, AgentPlan, AgentRequest } from './agent/launch.js';
import type { OnboardRequest, Onboarding } from './onboard/index.js';
import type { DatasetHealth, Report } from './stats/index.js';
import type { ReportName } from './stats/reports.js';
import type { SyncPlan, SyncRequest, SyncIO } from './sync/index.js';
import type { RunningServer, ServeOptions } from './serve/server.js';
import type { CatalogServing } from './serve/catalog-mounts.js';

export { INPUT_FORMATS, OUTPUT_FORMATS, type InputFormat, type OutputFormat } from './formats/registry.js';
export { BUILTIN_DESCRIPTIONS, DEFAULT_PIN, type Pin, type PinKind } from './pins/pins.js';
export { EXPORT_FORMATS, type ExportFormat } from './export/formats.js';
export { FIND_DEFAULTS, FIND_SORTS, type FindSort } from './search/limits.js';
export { QUERY_DEFAULTS, DEFAULT_MOUNT } from './search/limits.js';
export { COMPACTION_DEFAULTS, WRITE_DEFAULTS } from './dataset/defaults.js';
export { REPORTS, type ReportName } from './stats/reports.js';
export type { ResolveContext } from './pins/resolve.js';
export type { DatasetHealth, RelationHealth, Report, ReportRow } from './stats/index.js';
export type { DropOptions, DropTarget } from './drop/index.js';
export type { ExportOptions, ExportSummary } from './export/export.js';
export type { ExportFilter } from './export/select.js';
export type { FindDocument, FindMatch, FindRequest } from './search/find.js';
export type { Identity } from './search/planner.js';
export type { ImportSummary, FormatTotals, DuplicatePolicy, ErrorPolicy } from './import/import.js';
export type { SkippedFile } from './import/skip.js';
export type { ImportPlan, ImportRequest } from './import/plan.js';
export type { ImportIO } from './import/thread/client.js';
export type { ListIO, SourceListing } from './list/index.js';
export type { SourceRow } from './list/raw.js';
export type { PinDetails, PinListing, PinRequest } from './pins/manage.js';
export type { QueryMount, QueryOutcome, QueryRequest } from './search/query.js';
export type { IssuedUser, LibraryListing, LibraryRequest } from './catalog/manage.js';
export { AGENTS, type AgentName } from './agent/names.js';
export type { AgentEnd, AgentPlan, AgentRequest } from './agent/launch.js';
export { ONBOARD_SECTIONS, type OnboardSection } from './onboard/sections.js';
export type { OnboardRequest, Onboarding } from './onboard/index.js';
export type { Lesson, LessonStep } from './onboard/lessons.js';
export type { ShowRequest, Transcript, TranscriptKey, TranscriptRun, TranscriptStep, TranscriptToolCall } from './show/transcript.js';
export type { WriteMode } from './dataset/writer.js';
export type { BatchReport, SyncPlan, SyncRequest } from './sync/index.js';
export { SYNC_DEFAULTS } from './sync/defaults.js';
export { DEFAULT_SERVE_MOUNT, GATEWAY_MOUNT, RESERVED_SERVE_NAMES } from './serve/names.js';
export { DEFAULT_SPLIT_IDLE_MS } from './serve/gateway/defaults.js';
export { parseListenAddress, type ListenAddress } from './serve/address.js';
export type { MountSpec } from './serve/mounts.js';
export type { GatewayServeOptions, RunningServer, ServeOptions } from './serve/server.js';
export type { CatalogServing } from './serve/catalog-mounts.js';

// ---- pins ----

/** The kind of place a uri names (`local`, `s3`, `catalog`), before credentials are gathered. */
export async function uriKind(uri: string, env: NodeJS.ProcessEnv): Promise<Pin['kind']> {
  return (await import('./pins/manage.js')).uriKind(uri, env);
}

export async function addPin(rc: ResolveContext, request: PinRequest): Promise<Pin> {
  return (await import('./pins/manage.js')).addPin(rc, request);
}

export async function removePin(rc: ResolveContext, name: string): Promise<void> {
  return (await import('./pins/manage.js')).removePin(rc, name);
}

/** Changes a pin's uri, keeping its endpoint, region and credentials. */
export async function setPinUri(rc: ResolveContext, name: string, uri: string): Promise<Pin> {
  return (await import('./pins/manage.js')).setPinUri(rc, name, uri);
}

export async function renamePin(rc: ResolveContext, from: string, to: string): Promise<Pin> {
  return (await import('./pins/manage.js')).renamePin(rc, from, to);
}

/** User pins by name, then the built-in pins. */
export async function listPins(rc: ResolveContext): Promise<PinListing> {
  return (await import('./pins/manage.js')).listPins(rc);
}

export async function showPin(rc: ResolveContext, name: string): Promise<PinDetails> {
  return (await import('./pins/manage.js')).showPin(rc, name);
}

// ---- reading ----

/** The run sources of a dataset, or of a place holding source files (read as import would read them). */
export async function listSources(rc: ResolveContext, dataset: string | undefined, io: ListIO): Promise<SourceListing> {
  return (await import('./reading.js')).listSources(rc, dataset, io);
}

/** Kind, snapshot, index state and per-relation counts of a dataset (rebuilding a missing or stale index). */
export async function datasetHealth(rc: ResolveContext, dataset: string | undefined, progress?: ProgressFactory): Promise<DatasetHealth> {
  return (await import('./reading.js')).datasetHealth(rc, dataset, progress);
}

/** One of the built-in reports (REPORTS) of a Storyline dataset. */
export async function statsReport(rc: ResolveContext, dataset: string | undefined, name: ReportName, progress?: ProgressFactory): Promise<Report> {
  return (await import('./reading.js')).statsReport(rc, dataset, name, progress);
}

/** Runs and steps matching `--match` expressions or an identity. */
export async function find(rc: ResolveContext, request: FindRequest): Promise<FindDocument> {
  return (await import('./reading.js')).findInDataset(rc, request);
}

/** One read-only SQL statement over mounted datasets; rows are handed to the request's callbacks. */
export async function query(rc: ResolveContext, request: QueryRequest): Promise<QueryOutcome> {
  return (await import('./reading.js')).runQuery(rc, request);
}

/** One run as a transcript: its steps, tool calls, tokens, cost and timings. */
export async function showRun(rc: ResolveContext, request: ShowRequest): Promise<Transcript> {
  return (await import('./reading.js')).showTranscript(rc, request);
}

// ---- directory service (the ACL file of `serve --catalog-config`) ----

/** Registers a library (a local path or s3:// uri) in the ACL file; never touches the data. */
export async function addCatalogDataset(aclPath: string, request: LibraryRequest): Promise<LibraryListing> {
  return (await import('./catalog/manage.js')).addLibrary(aclPath, request);
}

export async function removeCatalogDatasets(aclPath: string, names: readonly string[]): Promise<string[]> {
  return (await import('./catalog/manage.js')).removeLibraries(aclPath, names);
}

export async function listCatalogDatasets(aclPath: string): Promise<LibraryListing[]> {
  return (await import('./catalog/manage.js')).listLibraries(aclPath);
}

/** A user's key pair: the secret is returned this once, the file keeps its salted hash. */
export async function issueCatalogUser(aclPath: string, name: string, rotate: boolean): Promise<IssuedUser> {
  return (await import('./catalog/manage.js')).issueUser(aclPath, name, rotate);
}

/** Grants or revokes libraries; returns the user's grants after the change. */
export async function changeCatalogGrants(aclPath: string, user: string, datasets: readonly string[], change: 'grant' | 'revoke'): Promise<string[]> {
  return (await import('./catalog/manage.js')).changeGrants(aclPath, user, datasets, change);
}

/** `serve --catalog-config`: the libraries as mounts, and the directory service's routes. */
export async function catalogServing(aclPath: string): Promise<CatalogServing> {
  return (await import('./serve/catalog-mounts.js')).catalogServing(aclPath);
}

// ---- onboard ----

/** The walkthrough's dataset (the user's, or temporary example data) and its lessons; call `cleanup` at the end. */
export async function prepareOnboarding(rc: ResolveContext, request: OnboardRequest, io: ImportIO): Promise<Onboarding> {
  return (await import('./onboard/index.js')).prepareOnboarding(rc, request, io);
}

// ---- agent ----

/** The command line and prompt that start a coding agent on a dataset (reading its overview unless left out). */
export async function planAgent(rc: ResolveContext, request: AgentRequest): Promise<AgentPlan> {
  return (await import('./agent/launch.js')).planAgent(rc, request);
}

/** Runs the agent to its end (exit 6 when it is not installed), passing `stop` on to it; returns its exit status or the signal that killed it. */
export async function runAgent(plan: AgentPlan, stop?: AbortSignal): Promise<AgentEnd> {
  return (await import('./agent/launch.js')).runAgent(plan, stop);
}

// ---- serving ----

/** Starts the read-only API and web interface (and the control listener) over the mounts; resolves once listening. */
export async function startServer(rc: ResolveContext, options: ServeOptions): Promise<RunningServer> {
  return (await import('./serve/server.js')).startServer(rc, options);
}

// ---- writing ----

/** Resolves and checks an import: what it reads, where it writes, whether it replaces a dataset. */
export async function planImport(rc: ResolveContext, request: ImportRequest): Promise<ImportPlan> {
  return (await import('./writing.js')).planImport(rc, request);
}

/** Runs a planned import on its own thread. */
export async function runImport(plan: ImportPlan, io: ImportIO): Promise<ImportSummary> {
  return (await import('./writing.js')).runImportPlan(plan, io);
}

export async function exportDataset(rc: ResolveContext, options: ExportOptions): Promise<ExportSummary> {
  return (await import('./writing.js')).runExport(rc, options);
}

/** Checks that a DATASET argument names a dataset that may be dropped (never a root, home, or a directory with strangers). */
export async function checkDrop(rc: ResolveContext, dataset: string): Promise<DropTarget> {
  return (await import('./writing.js')).checkDropTarget(rc, dataset);
}

/** Removes a checked dataset, holding its writer lock (checked again under it). */
export async function drop(target: DropTarget, options: DropOptions): Promise<void> {
  return (await import('./writing.js')).dropDataset(target, options);
}

/** Checks a sync's arguments before anything runs (spec/trajstore.md, sync rules). */
export async function planSync(request: SyncRequest): Promise<SyncPlan> {
  return (await import('./writing.js')).planSync(request);
}

/** Runs the sync worker until it is stopped, or one batch with `--once`; prices come from the configuration. */
export async function runSync(rc: ResolveContext, plan: SyncPlan, io: Omit<SyncIO, 'prices'>): Promise<void> {
  const writing = await import('./writing.js');
  const { prices } = await writing.loadConfig(rc.config, { env: rc.env });
  return writing.runSync(plan, { ...io, prices });
}
