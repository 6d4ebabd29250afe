/**
 * RFC 3339 date-times (`2026-05-02T08:00:03.100Z`, `2026-05-02 10:00:03+02:00`): a full date, a
 * time and a zone offset. Shared by the gateway's event records and sandboxd's `expiresAt`.
 */
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/**
 * Whether `text` is an RFC 3339 date-time of a day and time that exist. Date.parse alone is not
 * enough: it takes other shapes (`May 2, 2026`, no zone: local time), rolls `02-30` over to March
 * and takes the hour 24. A leap second (`:60`) is refused, as no JavaScript date can hold it.
 */
export function isRfc3339(text: string): boolean {
  const m = RFC3339.exec(text);
  if (!m || Number.isNaN(Date.parse(text)) || Number(m[4]) > 23) return false;
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
  // Date.UTC reads years below 100 as 19xx: set the year apart.
  const date = new Date(Date.UTC(2000, month - 1, day));
  date.setUTCFullYear(year);
  return date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}
