-- timeouts: a helper put in front of the scripts that need it (not sent
-- on its own).
--
-- longest_read_timeout(key, prefix): the longest PTTL of the read holds'
-- timeout keys on the read-write lock hash `key`, Redisson's rule for the
-- TTL a hash keeps after a read unlock. Every field whose value is a
-- number (a read count, or a write count, whose keys never exist) with
-- count c has keys `<prefix>:<field>:rwlock_timeout:<n>`, n = 1..c;
-- `prefix` is "{name}" ("name" if it has braces). Returns -3 (Redisson's
-- starting value) when the hash has no such key.
local function longest_read_timeout(key, prefix)
    local longest = -3
    local fields = redis.call('hgetall', key)
    for i = 1, #fields, 2 do
        local count = tonumber(fields[i + 1])
        if count then
            for n = count, 1, -1 do
                local ttl = redis.call('pttl', prefix .. ':' .. fields[i] .. ':rwlock_timeout:' .. n)
                if ttl > longest then
                    longest = ttl
                end
            end
        end
    end
    return longest
end
