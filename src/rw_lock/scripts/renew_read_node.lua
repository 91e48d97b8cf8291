-- renew_read_node: renew_read.lua for every read lease one Redis Cluster
-- node serves, in one call, whatever their hash slots (Redis 7.0+). The
-- keys are passed as arguments, not KEYS, because declared keys must
-- share one slot; no key is declared: the call is sent to the node itself.
--
-- ARGV[1]                          the batch's nonce, echoed first
-- ARGV[2]                          0 only checks; otherwise renews
-- ARGV[4i-1] .. ARGV[4i+2]         the i-th lock hash, the owner's
--                                  timeout prefix on it, its read field,
--                                  and the TTL in milliseconds its holds
--                                  need (see renew_read.lua)
--
-- Reply: {nonce, then i for each lease whose field is gone, and -i for
-- each key this node does not serve (its slot moved away, or is moving:
-- redis.pcall catches the node's refusal), which the client sends again
-- per slot}. Every renewal applied is idempotent.
local renew = tonumber(ARGV[2]) > 0
for i = 1, (#ARGV - 2) / 4 do
    local key, prefix, field = ARGV[4 * i - 1], ARGV[4 * i], ARGV[4 * i + 1]
    local ttl = renew and tonumber(ARGV[4 * i + 2]) or 0
    local held = redis.pcall('hget', key, field)
    local count = type(held) ~= 'table' and tonumber(held)
    if type(held) == 'table' then
        lost(-i)
    elseif count and count > 0 then
        raise_reads(key, prefix, count, ttl)
    else
        lost(i)
    end
end
return verdict()
