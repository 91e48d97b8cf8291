-- acquire_check: the fenced acquire's check before the request record
-- (core/script.rs, "A check before the record").
--
-- KEYS[1]  the lock hash
-- ARGV[2]  owner field
--
-- Someone else holds the lock: the try changes nothing, so it is answered
-- at once, `early` = {0, pttl}, with no record read or written (a copy of
-- it that runs again is answered the same way, or, the lock free by then,
-- goes on like any request). Every other case reads and writes the record
-- as always: a copy of an acquire that ran must be answered with the
-- token its first run took, which only the record keeps (the plain
-- lock's check answers such a copy from the state; this one cannot).
local pttl = redis.call('pttl', KEYS[1])
found.pttl = pttl
if pttl ~= -2 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    early = {0, pttl}
end
