-- count_down: take one off the count, as Redisson's
-- RCountDownLatch.countDown.
--
-- KEYS[1]  the count (string)
-- KEYS[2]  the channel, or left out (see try_set_count.lua)
-- KEYS[#KEYS]  this call's latch
-- ARGV[1]  "publish" or "spublish"
-- ARGV[2]  latch TTL in milliseconds
-- ARGV[3]  request id
--
-- Reply (after the rid): {2} the count reached zero: the key is deleted
-- and "0" published; {1} otherwise. A count at or below zero deletes the
-- key (a count-down of a missing latch creates -1 and deletes it at once,
-- publishing nothing, as Redisson does).
--
-- Retry policy: idempotent by request id (a re-send never counts down
-- twice; Redisson's count-down is not retried at all).
local function body()
    local left = redis.call('decr', KEYS[1])
    if left <= 0 then
        redis.call('del', KEYS[1])
    end
    if left == 0 then
        if #KEYS == 3 then
            redis.call(ARGV[1], KEYS[2], '0')
        end
        return {2}
    end
    return {1}
end
