/** The sections of `trajstore onboard`, in the order a walkthrough takes them (apart from the lessons so that --help names them without loading them). */
export const ONBOARD_SECTIONS = ['stats', 'find', 'query', 'show', 'export'] as const;
export type OnboardSection = (typeof ONBOARD_SECTIONS)[number];
