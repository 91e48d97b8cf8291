-- refresh: a waiting leasehold waiter shows it is alive (every 2 s while
-- it waits): its liveness sign and score are refreshed as `keep_alive`
-- does (queue.lua).
--
-- KEYS[1]  the queue (list)
-- KEYS[2]  the timeouts (zset)
-- KEYS[3]  the grants (hash)
-- ARGV[1]  the waiter's field
-- ARGV[2]  now: the client's clock, epoch milliseconds
-- ARGV[3]  thread wait in milliseconds (see acquire.lua)
--
-- Reply: 1 refreshed; 0 the waiter is not queued (purged, or popped by a
-- grant): nobody will tell it its turn, so it re-checks.
--
-- Retry policy: idempotent (a refresh sent twice sets the same values
-- from its own `now`); not retried: the next refresh follows.
if keep_alive(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])) then
    return 1
end
return 0
