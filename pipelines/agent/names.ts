/** The agents `trajstore agent` starts, apart from the launcher so that --help can list them without loading it. */
export const AGENTS = ['agenta', 'agentb'] as const;
export type AgentName = (typeof AGENTS)[number];
