/**
 * Builds Claude Code session lines (the `agentb-code` format) of every kind the community schema of
 * CLI 2.1.144 describes (`agent-schemas/claude-code/v2.1.144/session.schema.json` in the shared
 * fixtures: 17 line types, and the content blocks of user and assistant messages), so tests can
 * write session files a newer Claude Code would write without adding fixtures. Each builder returns
 * one line as an object; `jsonl` joins them into a file's text.
 */

export type Line = Record<string, unknown>;

export const SESSION_ID = '5e551011-0000-4000-8000-000000000001';
const VERSION = '2.1.144';
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

export const blocks = {
  text: (text: string) => ({ type: 'text', text }),
  thinking: (thinking: string) => ({ type: 'thinking', thinking, signature: 'c2lnbmF0dXJl' }),
  redactedThinking: () => ({ type: 'redacted_thinking', data: 'ZW5jcnlwdGVk' }),
  toolUse: (id: string, name: string, input: Record<string, unknown>) => ({ type: 'tool_use', id, name, input, caller: { type: 'direct' } }),
  serverToolUse: (id: string, name: string) => ({ type: 'server_tool_use', id, name, input: {} }),
  advisorResult: (toolUseId: string, text: string) => ({ type: 'advisor_tool_result', tool_use_id: toolUseId, content: { type: 'advisor_result', text } }),
  toolResult: (toolUseId: string, content: unknown, isError?: boolean) => ({ type: 'tool_result', tool_use_id: toolUseId, content, ...(isError !== undefined ? { is_error: isError } : {}) }),
  image: () => ({ type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } }),
  document: () => ({ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0xLjQK' } }),
  toolReference: (toolName: string) => ({ type: 'tool_reference', tool_name: toolName }),
};

export interface Usage {
  input_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  output_tokens: number;
}

/** The lines of one session, with the envelope every conversation line carries and a parentUuid chain. */
export class ClaudeSession {
  private n = 0;
  private last: string | null = null;

  constructor(
    readonly sessionId = SESSION_ID,
    private readonly envelopeExtra: Line = {},
  ) {}

  private uuid(): string {
    this.n += 1;
    return `00000000-0000-4000-8000-${String(this.n).padStart(12, '0')}`;
  }

  private timestamp(): string {
    return new Date(Date.UTC(2026, 4, 20, 9, 0, 0) + this.n * 1000).toISOString();
  }

  private envelope(type: string, body: Line): Line {
    const uuid = this.uuid();
    const line = {
      parentUuid: this.last,
      isSidechain: false,
      userType: 'external',
      cwd: '/home/dev/app',
      sessionId: this.sessionId,
      version: VERSION,
      gitBranch: 'main',
      entrypoint: 'cli',
      ...this.envelopeExtra,
      type,
      uuid,
      timestamp: this.timestamp(),
      ...body,
    };
    this.last = uuid;
    return line;
  }

  user(content: string | unknown[], extra: Line = {}): Line {
    return this.envelope('user', { message: { role: 'user', content }, ...extra });
  }

  /** A user line carrying tool results, with the structured `toolUseResult` Claude Code adds. */
  toolResults(results: unknown[], toolUseResult?: unknown): Line {
    return this.user(results, toolUseResult !== undefined ? { toolUseResult } : {});
  }

  /** One API response written as Claude Code does: a line per content block, all with the same message id, request id and usage. */
  response(messageId: string, content: unknown[], usage: Usage, stopReason = 'end_turn'): Line[] {
    const requestId = `req_${messageId.replace(/^msg_/, '')}`;
    return content.map((block, i) =>
      this.envelope('assistant', {
        requestId,
        message: {
          model: 'claude-opus-4-5-20251101',
          id: messageId,
          type: 'message',
          role: 'assistant',
          content: [block],
          stop_reason: i === content.length - 1 ? stopReason : null,
          stop_sequence: null,
          usage: { ...usage, service_tier: 'standard', cache_creation: { ephemeral_5m_input_tokens: usage.cache_creation_input_tokens, ephemeral_1h_input_tokens: 0 } },
        },
      }),
    );
  }

  system(subtype: string, body: Line = {}): Line {
    return this.envelope('system', { subtype, level: 'info', isMeta: false, ...body });
  }

  attachment(attachment: Line): Line {
    return this.envelope('attachment', { attachment });
  }

  progress(toolUseID: string, data: Line): Line {
    return this.envelope('progress', { toolUseID, parentToolUseID: toolUseID, data });
  }

  /** One line of each kind that carries no conversation (the schema's other 14 line types, attachment and progress aside). */
  bookkeeping(leafUuid: string): Record<string, Line> {
    const sessionId = this.sessionId;
    const ts = this.timestamp();
    const snapshotId = this.uuid();
    return {
      'file-history-snapshot': { type: 'file-history-snapshot', messageId: snapshotId, snapshot: { messageId: snapshotId, trackedFileBackups: {}, timestamp: ts }, isSnapshotUpdate: false },
      'queue-operation': { type: 'queue-operation', operation: 'enqueue', timestamp: ts, sessionId, content: 'and run the tests' },
      'pr-link': { type: 'pr-link', sessionId, prNumber: 42, prUrl: 'https://github.com/acme/app/pull/42', prRepository: 'acme/app', timestamp: ts },
      'agent-name': { type: 'agent-name', agentName: 'reviewer', sessionId },
      'custom-title': { type: 'custom-title', customTitle: 'Fix the parser', sessionId },
      'ai-title': { type: 'ai-title', aiTitle: 'Parser fix', sessionId },
      'last-prompt': { type: 'last-prompt', lastPrompt: 'fix the parser', sessionId, leafUuid },
      'permission-mode': { type: 'permission-mode', permissionMode: 'acceptEdits', sessionId },
      'agent-setting': { type: 'agent-setting', agentSetting: 'claude', sessionId },
      'bridge-session': { type: 'bridge-session', sessionId, bridgeSessionId: 'cse_01abc', lastSequenceNum: 7 },
      'worktree-state': { type: 'worktree-state', sessionId, worktreeSession: { originalCwd: '/home/dev/app', worktreePath: '/home/dev/app-wt', worktreeName: 'wt', worktreeBranch: 'wt', originalBranch: 'main', sessionId } },
      summary: { type: 'summary', summary: 'Fixed the parser', leafUuid },
    };
  }
}

export const jsonl = (lines: Line[]): string => lines.map((l) => `${JSON.stringify(l)}\n`).join('');
