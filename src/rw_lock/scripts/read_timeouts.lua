-- Before renew_read.lua and renew_read_node.lua (after the watchdog's
-- batch helpers, core/scripts/renew_batch.lua): raise_reads raises an
-- owner's read timeout keys <prefix>:1..count and the lock hash to ttl
-- ms, never lowering them (a missing timeout key is made again); ttl 0
-- only checks.
local function raise_reads(key, prefix, count, ttl)
    if ttl > 0 then
        for n = 1, count do
            if redis.call('pttl', prefix .. ':' .. n) < ttl then
                redis.call('set', prefix .. ':' .. n, 1, 'px', ttl)
            end
        end
        raise(key, ttl)
    end
end
