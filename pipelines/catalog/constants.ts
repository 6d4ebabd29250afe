/** The directory service's constants, apart from its code so that the engine's entry module can name them without loading it. */

/** How long a ticket is good for (documented in the README). */
export const TICKET_LIFETIME_MS = 15 * 60_000;

/** Where the service's routes live on serve's listener. */
export const CATALOG_PREFIX = '/catalog/v1';
