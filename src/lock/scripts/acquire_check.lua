-- acquire_check: the acquire's check before the request record
-- (core/script.rs, "A check before the record").
--
-- KEYS[1]  the lock hash
-- ARGV[2]  owner field
-- ARGV[3]  1: no call of this client has an unknown outcome that a copy
--          could still be on its way for (core/conn.rs,
--          `records_optional`); 0: read the record as always
--
-- * Someone else holds the lock: a refused try changes nothing, so it
--   neither reads nor writes the record: `early` is its reply, {0, pttl}
--   (the rid is put in front). A copy of it that runs again is refused
--   again, or, the lock free or ours by then, goes on like any acquire.
-- * No lock key, with ARGV[3] 1: the record is not read. A copy of this
--   request that ran before left our field (then the key exists and the
--   record is read), or its hold is gone since, and running again takes
--   the hold Redis then shows, which is the one the caller counts; a copy
--   of an older request cannot arrive (a call ends only once no copy of it
--   can reach Redis any more: core/fence.rs).
--
-- Sets `pttl` (the lock's PTTL, -2: no key) for the body.
local pttl = redis.call('pttl', KEYS[1])
local early = nil
if pttl ~= -2 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    early = {0, pttl}
end
local read_record = not (pttl == -2 and ARGV[3] == '1')
