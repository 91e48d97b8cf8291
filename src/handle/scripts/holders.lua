-- holders: who holds a lock and for how long, read in one step (for
-- operators: Lock::holders).
--
-- KEYS[1]  the lock hash
--
-- Reply: {pttl, field1, value1, field2, value2, ...}: the key's remaining
-- TTL in milliseconds (-2: no key, -1: no expiry), then every field of the
-- hash with its value (a hold count), as HGETALL gives them.
--
-- Retry policy: read-only; not retried (the caller sees the error).
local out = {redis.call('pttl', KEYS[1])}
if out[1] == -2 then
    return out
end
local all = redis.call('hgetall', KEYS[1])
for i = 1, #all do
    out[i + 1] = all[i]
end
return out
