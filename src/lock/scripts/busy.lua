-- busy: the acquire's check that someone else holds the lock, run before
-- the request record is read (core/script.rs, "A check before the
-- record").
--
-- KEYS[1]  the lock hash
-- ARGV[2]  owner field
--
-- A refused try changes nothing, so it neither reads nor writes the
-- record: `early` is its reply, {0, pttl} (the rid is put in front). A copy
-- of it that runs again is refused again, or, the lock free or ours by
-- then, goes through the record like any acquire. Sets `pttl` (the lock's
-- PTTL, -2: no key) for the body.
local pttl = redis.call('pttl', KEYS[1])
local early = nil
if pttl ~= -2 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    early = {0, pttl}
end
