-- The watchdog's batch (core/watchdog/), put before every kind's renewal
-- script by Script::renewal: the reply is the batch's nonce (ARGV[1]),
-- then the index of each entry found gone (lost(i)); a cluster node's
-- batch adds -i for each key the node does not serve; a renewal script
-- ends with `return verdict()`. raise(key, ttl)
-- raises a key's TTL to ttl ms, never lowers it (ttl 0: only checks), so
-- a renewal cannot cut a longer fixed lease of the same owner short.
local gone = {tonumber(ARGV[1])}
local function lost(i)
    gone[#gone + 1] = i
end
local function verdict()
    return gone
end
local function raise(key, ttl)
    if ttl > 0 and redis.call('pttl', key) < ttl then
        redis.call('pexpire', key, ttl)
    end
end
