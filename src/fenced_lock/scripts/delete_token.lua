-- delete_token: delete a fenced lock's token counter, unless the lock is
-- held.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the token counter
--
-- Returns 1 when the counter was deleted; 0 when nothing was deleted (the
-- lock is held by anyone, or there was no counter). The check and the
-- delete are one step: no acquire can take a token in between.
--
-- Retry policy: not retried (the caller sees the error); a second run
-- finds nothing to delete.
if redis.call('exists', KEYS[1]) == 1 then
    return 0
end
return redis.call('del', KEYS[2])
