/**
 * A memo of a pure function of a string key, bounded: cleared when it holds `limit` entries, so
 * that keys made of user data (workflow and step names) cannot grow it without end.
 */
export const boundedMemo = <V>(compute: (key: string) => V, limit = 4096): ((key: string) => V) => {
  const values = new Map<string, V>()
  return (key) => {
    const known = values.get(key)
    if (known !== undefined) return known
    const value = compute(key)
    if (values.size >= limit) values.clear()
    values.set(key, value)
    return value
  }
}
