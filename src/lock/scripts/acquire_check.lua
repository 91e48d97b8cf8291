-- acquire_check: the acquire's check before the request record
-- (core/script.rs, "A check before the record").
--
-- KEYS[1]  the lock hash
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field
-- ARGV[3]  the hold count the client counts for this owner before this
--          acquire, or -1: read and write the record as always (a call of
--          the client has an unknown outcome: core/conn.rs,
--          `records_optional`)
--
-- * Someone else holds the lock: a refused try changes nothing, so it
--   neither reads nor writes the record: `early` is its reply, {0, pttl}.
--   A copy of it that runs again is refused again, or, the lock free or
--   ours by then, goes on like any acquire.
-- * Redis holds what the client counts (no key for 0, the field at that
--   count otherwise): this is the request's first run, and taking the hold
--   moves Redis to what the client will count from the reply. No record
--   is read or written: a copy of this request finds the next case.
-- * The field holds one more than the client counts: a copy of this
--   request already ran (or Redis already held what this acquire would
--   give). Answered from the state, as a replay: {1, count}, the key's TTL
--   raised to the lease (never lowered). Either way the client then
--   counts what Redis holds.
-- * Any other count (the client's count is out of date): the record is
--   read and written as always.
--
-- Hands the body `found.pttl` (the lock's PTTL, -2: no key).
local pttl = redis.call('pttl', KEYS[1])
found.pttl = pttl
local expected = tonumber(ARGV[3])
if pttl == -2 then
    if expected == 0 then
        read_record, write_record = false, false
    end
else
    local count = redis.call('hget', KEYS[1], ARGV[2])
    if not count then
        early = {0, pttl}
    elseif expected >= 0 and tonumber(count) == expected then
        read_record, write_record = false, false
    elseif expected >= 0 and tonumber(count) == expected + 1 then
        if pttl >= 0 and pttl < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        early, early_replay = {1, tonumber(count)}, true
    end
end
