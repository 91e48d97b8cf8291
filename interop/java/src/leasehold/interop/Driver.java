package leasehold.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;

import org.redisson.Redisson;
import org.redisson.api.RAtomicLong;
import org.redisson.api.RBucket;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

/**
 * A Redisson client driven line by line, for leasehold's interop tests
 * (tests/redisson_interop.rs).
 *
 * <p>Arguments: the redis URL and the lock watchdog timeout in ms. Prints
 * {@code ready <client-id>} once connected, then reads one command per line
 * on stdin:
 *
 * <pre>
 *   ID WORKER VERB ARGS...
 * </pre>
 *
 * <p>WORKER names a Java thread of this driver (created on first use):
 * commands of one worker run in order on that thread, so a lock taken by
 * {@code w1} is unlocked by {@code w1} (Redisson binds holds to threads);
 * commands of different workers run at once. Each command answers with one
 * line:
 *
 * <pre>
 *   ID ok START_US END_US [VALUE]
 *   ID err START_US END_US CLASS: MESSAGE
 * </pre>
 *
 * <p>START_US and END_US are wall-clock microseconds since the epoch taken
 * just before and just after the Redisson call, so the test can measure
 * wake-ups across the two processes of one machine. Lock kinds: {@code lock}
 * (RLock), {@code fair} (RFairLock), {@code fenced} (RFencedLock),
 * {@code read} and {@code write} (RReadWriteLock). A lease of 0 or none means
 * the watchdog keeps the lock.
 */
public final class Driver {
    private static final PrintStream OUT =
            new PrintStream(System.out, true, StandardCharsets.UTF_8);

    private final RedissonClient redisson;
    private final Map<String, ExecutorService> workers = new ConcurrentHashMap<>();

    private Driver(RedissonClient redisson) {
        this.redisson = redisson;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: Driver REDIS_URL WATCHDOG_MS");
            System.exit(2);
        }
        Config config = new Config();
        // Kryo throws in this build of Redisson; the locks use their own codecs.
        config.setCodec(StringCodec.INSTANCE);
        config.setLockWatchdogTimeout(Long.parseLong(args[1]));
        config.useSingleServer()
                .setAddress(args[0])
                .setConnectionMinimumIdleSize(2)
                .setConnectionPoolSize(16)
                .setSubscriptionConnectionMinimumIdleSize(1);
        Driver driver = new Driver(Redisson.create(config));
        OUT.println("ready " + driver.redisson.getId());
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" +");
            if (words.length < 3) {
                continue;
            }
            if (words[2].equals("exit")) {
                break;
            }
            driver.submit(words);
        }
        // Stdin closed or `exit`: leave without unlocking anything, as a
        // process that goes away would (the tests kill it to crash it).
        Runtime.getRuntime().halt(0);
    }

    private void submit(String[] words) {
        String id = words[0];
        ExecutorService worker = workers.computeIfAbsent(words[1], name ->
                Executors.newSingleThreadExecutor(task -> {
                    Thread t = new Thread(task, "worker-" + name);
                    t.setDaemon(true);
                    return t;
                }));
        worker.execute(() -> {
            long start = micros();
            try {
                Object value = run(words);
                reply(id, "ok", start, value == null ? "" : value.toString());
            } catch (Throwable e) {
                String message = String.valueOf(e.getMessage()).replace('\n', ' ');
                reply(id, "err", start, e.getClass().getName() + ": " + message);
            }
        });
    }

    private static void reply(String id, String status, long start, String value) {
        String line = id + " " + status + " " + start + " " + micros()
                + (value.isEmpty() ? "" : " " + value);
        synchronized (OUT) {
            OUT.println(line);
        }
    }

    private static long micros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    private Lock lockOf(String kind, String name) {
        switch (kind) {
            case "lock":
                return redisson.getLock(name);
            case "fair":
                return redisson.getFairLock(name);
            case "fenced":
                return redisson.getFencedLock(name);
            case "read":
                return redisson.getReadWriteLock(name).readLock();
            case "write":
                return redisson.getReadWriteLock(name).writeLock();
            default:
                throw new IllegalArgumentException("unknown lock kind " + kind);
        }
    }

    private RLock rlock(String kind, String name) {
        return (RLock) lockOf(kind, name);
    }

    private static long arg(String[] words, int i, long otherwise) {
        return words.length > i ? Long.parseLong(words[i]) : otherwise;
    }

    private Object run(String[] w) throws Exception {
        switch (w[2]) {
            case "thread":
                // The hash field this worker locks as.
                return redisson.getId() + ":" + Thread.currentThread().getId();
            case "lock": {
                long lease = arg(w, 5, 0);
                if (w[3].equals("fenced")) {
                    RFencedLock fenced = redisson.getFencedLock(w[4]);
                    // The synchronous lockAndGetToken(lease, unit) ignores
                    // the lease (REDISSON-WIRE.md §8): watchdog only here.
                    return fenced.lockAndGetToken();
                }
                RLock lock = rlock(w[3], w[4]);
                if (lease > 0) {
                    lock.lock(lease, TimeUnit.MILLISECONDS);
                } else {
                    lock.lock();
                }
                return "locked";
            }
            case "try_lock": {
                long wait = arg(w, 5, 0);
                if (w[3].equals("fenced")) {
                    Long token = redisson.getFencedLock(w[4])
                            .tryLockAndGetToken(wait, TimeUnit.MILLISECONDS);
                    return token == null ? "none" : token;
                }
                return rlock(w[3], w[4]).tryLock(wait, TimeUnit.MILLISECONDS);
            }
            case "unlock":
                rlock(w[3], w[4]).unlock();
                return "unlocked";
            case "force_unlock":
                return rlock(w[3], w[4]).forceUnlock();
            case "is_locked":
                return rlock(w[3], w[4]).isLocked();
            case "exclusive_loop":
                return exclusiveLoop(w[3], w[4], Long.parseLong(w[5]));
            case "sem_set":
                return redisson.getPermitExpirableSemaphore(w[3]).trySetPermits(Integer.parseInt(w[4]));
            case "sem_acquire": {
                RPermitExpirableSemaphore sem = redisson.getPermitExpirableSemaphore(w[3]);
                long lease = arg(w, 4, 0);
                return lease > 0 ? sem.acquire(lease, TimeUnit.MILLISECONDS) : sem.acquire();
            }
            case "sem_release":
                redisson.getPermitExpirableSemaphore(w[3]).release(w[4]);
                return "released";
            case "sem_available":
                return redisson.getPermitExpirableSemaphore(w[3]).availablePermits();
            case "sem_loop":
                return semaphoreLoop(w[3], Long.parseLong(w[4]), Long.parseLong(w[5]));
            case "latch_set":
                return redisson.getCountDownLatch(w[3]).trySetCount(Long.parseLong(w[4]));
            case "latch_count_down":
                redisson.getCountDownLatch(w[3]).countDown();
                return "counted";
            case "latch_count":
                return redisson.getCountDownLatch(w[3]).getCount();
            case "latch_await": {
                RCountDownLatch latch = redisson.getCountDownLatch(w[3]);
                return latch.await(Long.parseLong(w[4]), TimeUnit.MILLISECONDS);
            }
            default:
                throw new IllegalArgumentException("unknown verb " + w[2]);
        }
    }

    /**
     * Takes and gives back the lock for {@code millis}, and inside it does
     * an unprotected read-modify-write of {@code NAME:counter} and claims
     * {@code NAME:inside} with SET NX: a claim that fails is an overlap.
     * Returns "acquisitions overlaps".
     */
    private String exclusiveLoop(String kind, String name, long millis) {
        Lock lock = lockOf(kind, name);
        RBucket<String> counter = redisson.getBucket(name + ":counter");
        RBucket<String> inside = redisson.getBucket(name + ":inside");
        long deadline = System.nanoTime() + millis * 1_000_000L;
        long acquisitions = 0;
        long overlaps = 0;
        while (System.nanoTime() < deadline) {
            lock.lock();
            try {
                if (!inside.setIfAbsent("java")) {
                    overlaps++;
                }
                String value = counter.get();
                long next = (value == null ? 0 : Long.parseLong(value)) + 1;
                counter.set(Long.toString(next));
                inside.delete();
                acquisitions++;
            } finally {
                lock.unlock();
            }
        }
        return acquisitions + " " + overlaps;
    }

    /**
     * Acquires and releases a permit for {@code millis}; inside, INCRs
     * {@code NAME:in_use} and counts the times it went above
     * {@code permits}. Returns "acquisitions overs".
     */
    private String semaphoreLoop(String name, long millis, long permits) throws Exception {
        RPermitExpirableSemaphore sem = redisson.getPermitExpirableSemaphore(name);
        RAtomicLong inUse = redisson.getAtomicLong(name + ":in_use");
        long deadline = System.nanoTime() + millis * 1_000_000L;
        long acquisitions = 0;
        long overs = 0;
        while (System.nanoTime() < deadline) {
            String id = sem.acquire();
            try {
                if (inUse.incrementAndGet() > permits) {
                    overs++;
                }
                Thread.sleep(1);
                inUse.decrementAndGet();
                acquisitions++;
            } finally {
                sem.release(id);
            }
        }
        return acquisitions + " " + overs;
    }
}
