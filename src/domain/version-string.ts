/** The shape of a version string; isVersionString also asks for a real date and time. */
export const versionStringPattern = /^([0-9]{4})\.([0-9]{2})\.([0-9]{2})-([0-9]{2})([0-9]{2})([0-9]{2})$/;

/**
 * Whether a string is a version string of spec section 9: YYYY.MM.DD-HHMMSS
 * naming a real date and time (no February 30th, no hour 24, no leap
 * second), so that sorting the strings sorts the versions by time.
 */
export function isVersionString(value: string): boolean {
  const m = versionStringPattern.exec(value);
  if (m === null) return false;
  const [year, month, day, hour, minute, second] = m.slice(1).map(Number) as [number, number, number, number, number, number];
  if (year < 1 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59) return false;
  // Day 0 of the next month is the last day of this one; Date.UTC maps years
  // 0-99 to 1900-1999, which has the same leap years only by accident, so
  // compute leap years directly.
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  const daysInMonth = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]!;
  return day <= daysInMonth;
}
