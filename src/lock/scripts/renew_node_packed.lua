-- renew_node_packed: renew_packed.lua for every lease one Redis Cluster
-- node serves, in one call, whatever their hash slots (Redis 7.0+: the
-- flag lets a script touch keys of several slots of the node it runs on).
-- No key is declared: the call is sent to the node itself, so no
-- redirection can bounce it (core/script.rs).
--
-- ARGV[1]  the batch's nonce, echoed first in the reply
-- ARGV[2]  TTL in milliseconds; 0 only checks the fields
-- ARGV[3]  a MessagePack array: key 1, field 1, key 2, field 2, ...
--
-- Reply: {nonce, then i for each lease whose field is gone, and -i for
-- each key this node does not serve (its slot moved away, or is moving:
-- redis.pcall catches the node's refusal), which the client sends again
-- per slot}. Every renewal applied is idempotent (core/scripts/renew_batch.lua
-- comes first: gone, lost, raise).
local ttl = tonumber(ARGV[2])
local entries = cmsgpack.unpack(ARGV[3])
for i = 1, #entries / 2 do
    local key = entries[2 * i - 1]
    local held = redis.pcall('hexists', key, entries[2 * i])
    if type(held) == 'table' then
        lost(-i)
    elseif held == 1 then
        raise(key, ttl)
    else
        lost(i)
    end
end
return verdict()
