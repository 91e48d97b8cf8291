-- is_locked: whether a read-write lock is held in the given mode.
--
-- KEYS[1]  the lock hash
-- ARGV[1]  "read" or "write"
--
-- Write: mode is "write". Read: mode is "read", or "write" with read holds
-- beside the writer's field (more than two fields: Redisson's fix #4400).
-- Read-only; returns 1 or 0.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == ARGV[1] then
    return 1
end
if ARGV[1] == 'read' and mode == 'write' and redis.call('hlen', KEYS[1]) > 2 then
    return 1
end
return 0
