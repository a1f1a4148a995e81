-- dlock's PostgreSQL schema, version @VERSION@: the tables that hold the locks and the functions
-- that change them, one function call (one round trip, one transaction) per lock step.
--
-- Leases are measured on the server's clock (clock_timestamp()): a hold whose expires_at is not
-- after the clock is over, whoever still has a row for it. Every function that changes a lock
-- sets synchronous_commit for its own transaction (SET LOCAL) from its p_sync argument, so the
-- durability of a lock step is the client's setting whatever the server's default.

CREATE SCHEMA IF NOT EXISTS @S@;

-- The schema's version, read by every client when it connects.
CREATE TABLE IF NOT EXISTS @S@.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- One schema's lease tables are all logged or all unlogged ('tables' in meta; a schema made
-- before that key is logged): this SQL, made for the other sort, refuses to run on it.
DO $$
BEGIN
    IF coalesce((SELECT value FROM @S@.meta WHERE key = 'tables'),
                (SELECT 'logged' FROM @S@.meta WHERE key = 'version')) <> '@TABLES@' THEN
        RAISE EXCEPTION USING ERRCODE = 'DL003',
            MESSAGE = 'the dlock schema @S@ keeps its lease tables other than @TABLES@';
    END IF;
END
$$;

-- One row per lock name in use. family: 'e' reentrant or fenced lock, 'f' fair lock, 'w'
-- read-write lock, 's' semaphore, 'l' count-down latch, 'n' leader election. owner, holds, expires_at: the exclusive holder (the writer of a read-write
-- lock) and its lease, owner NULL when there is none. read_until: the longest reader's lease
-- end (read-write lock). contended: an acquire was refused (or a waiter subscribed) since the
-- row was made or last announced, so its release is announced with NOTIFY.
CREATE @UNLOGGED@TABLE IF NOT EXISTS @S@.locks (
    name       text COLLATE "C" PRIMARY KEY,
    family     "char" NOT NULL,
    owner      text COLLATE "C",
    holds      integer NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT '-infinity',
    read_until timestamptz NOT NULL DEFAULT '-infinity',
    contended  boolean NOT NULL DEFAULT false
) WITH (fillfactor = 70);

-- Version 4: the synchronizers. counter: a semaphore's available permits (NULL: never set), a
-- count-down latch's count (the row goes when it reaches zero). value: a leader's candidate id.
ALTER TABLE @S@.locks ADD COLUMN IF NOT EXISTS counter bigint;
ALTER TABLE @S@.locks ADD COLUMN IF NOT EXISTS value text;

-- The permits held of a semaphore, each with its own lease (a dead holder's permit comes back
-- when its lease ends).
CREATE @UNLOGGED@TABLE IF NOT EXISTS @S@.permits (
    name       text COLLATE "C" NOT NULL,
    owner      text COLLATE "C" NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
) WITH (fillfactor = 70);

-- The readers of a read-write lock, each with its own lease.
CREATE @UNLOGGED@TABLE IF NOT EXISTS @S@.readers (
    name       text COLLATE "C" NOT NULL,
    owner      text COLLATE "C" NOT NULL,
    holds      integer NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
) WITH (fillfactor = 70);

-- Version 6: the waiters of a read-write lock known to the store, by side ('w' a writer waiting,
-- 'r' a reader waiting behind a writer's hold) and waiter id (owner), each mark living until
-- `until`. While a writer's mark lives no new reader is let in; while a reader's lives no
-- writer takes the lock (the readers that waited go first): readers and writers go by turns. A
-- mark is not a use of the name; a waiter taking the lock, or giving up, removes its own.
CREATE @UNLOGGED@TABLE IF NOT EXISTS @S@.rw_waiters (
    name  text COLLATE "C" NOT NULL,
    side  "char" NOT NULL,
    owner text COLLATE "C" NOT NULL,
    until timestamptz NOT NULL,
    PRIMARY KEY (name, side, owner)
);
-- Version 15: the order in which the waiters were first refused (seq, from waiter_seq). A free
-- lock goes to the writer marked first alone: writers cannot starve one another either.
ALTER TABLE @S@.rw_waiters ADD COLUMN IF NOT EXISTS seq bigint NOT NULL DEFAULT 0;

-- Version 13: the waiters of a plain lock (reentrant or fenced) known to the store, by waiter
-- id (owner), in the order they were first refused (seq), each mark living until `until` (2 s
-- after its waiter's last attempt). A free lock goes to the first live one alone, so a waiter
-- waits for the holds of those before it at most. A mark is not a use of the name; a waiter
-- taking the lock, or giving up, removes its own.
CREATE @UNLOGGED@TABLE IF NOT EXISTS @S@.lock_waiters (
    name  text COLLATE "C" NOT NULL,
    owner text COLLATE "C" NOT NULL,
    seq   bigint NOT NULL,
    until timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
);
CREATE INDEX IF NOT EXISTS lock_waiters_in_order ON @S@.lock_waiters (name, seq);

-- The queue of a fair lock in arrival order (seq): owner is the waiter's id (a thread's place,
-- kept across its attempts). timeout_at: when a waiter that has not taken the lock is taken for
-- dead. grant_lease_us, wait_id, hold: the offer of the waiter's latest attempt (wait_id is that
-- attempt's number) to be handed the lock by the release that frees it, as the hold `hold`.
CREATE @UNLOGGED@TABLE IF NOT EXISTS @S@.waiters (
    name           text COLLATE "C" NOT NULL,
    owner          text COLLATE "C" NOT NULL,
    seq            bigint NOT NULL,
    timeout_at     timestamptz NOT NULL,
    grant_lease_us bigint,
    wait_id        bigint,
    PRIMARY KEY (name, owner)
);
ALTER TABLE @S@.waiters ADD COLUMN IF NOT EXISTS hold text COLLATE "C";

-- Version 12: the secret of each fair waiter's latest offer, which the release that grants the
-- offer sends back to the waiter alone as the grant's proof. The table lives in a schema of
-- its own, which only its owner and the lock users granted it may use: readers granted every
-- table of the lock schema are not granted this one.
CREATE SCHEMA IF NOT EXISTS @SECRETS@;
REVOKE ALL ON SCHEMA @SECRETS@ FROM PUBLIC;
CREATE @UNLOGGED@TABLE IF NOT EXISTS @SECRETS@.offers (
    name    text COLLATE "C" NOT NULL,
    waiter  text COLLATE "C" NOT NULL,
    attempt bigint NOT NULL,
    hold    text COLLATE "C" NOT NULL,
    secret  text NOT NULL,
    PRIMARY KEY (name, waiter)
);
REVOKE ALL ON @SECRETS@.offers FROM PUBLIC;

-- Version 1's steps, whose arguments changed: a hold's id and its waiter's are told apart.
DROP FUNCTION IF EXISTS @S@.acquire("char", text, text, bigint, boolean, bigint, bigint, bigint,
    text);
DROP FUNCTION IF EXISTS @S@.acquire_many("char"[], text[], text[], bigint[], boolean[], bigint[],
    bigint[], bigint[], text);
DROP FUNCTION IF EXISTS @S@._acquire("char", text, text, bigint, boolean, bigint, bigint, bigint,
    timestamptz);
DROP FUNCTION IF EXISTS @S@._acquire_f(text, text, bigint, boolean, bigint, bigint, bigint,
    timestamptz);
DROP FUNCTION IF EXISTS @S@._acquire_r(text, text, bigint, timestamptz);
-- Version 4's steps, whose arguments changed: an extend is told from an acquire, and a
-- set-once counter step is latched by its request id.
DROP FUNCTION IF EXISTS @S@.acquire("char", text, text, text, text, bigint, boolean, bigint,
    bigint, bigint, text);
DROP FUNCTION IF EXISTS @S@.acquire_many("char"[], text[], text[], text[], text[], bigint[],
    boolean[], bigint[], bigint[], bigint[], text);
DROP FUNCTION IF EXISTS @S@.counter("char", text, bigint, text);
DROP FUNCTION IF EXISTS @S@.acquire_leader(text, text, text, bigint, text);
-- Version 5's, whose arguments changed: a writer that waits marks itself, and gives up so.
DROP FUNCTION IF EXISTS @S@._acquire_w(text, text, bigint, timestamptz);
DROP FUNCTION IF EXISTS @S@._acquire_r(text, text, text, bigint, timestamptz);
DROP FUNCTION IF EXISTS @S@.cancel_wait(text, text, bigint, text);
-- Version 6's, whose arguments changed: a read extended by a marked waiter takes its mark.
DROP FUNCTION IF EXISTS @S@._extend("char", text, text, bigint, timestamptz);
-- Version 9's, whose arguments changed: a batch's acquire says its place when its hold ended.
DROP FUNCTION IF EXISTS @S@._unless_ended(text, text);
-- Version 11's, whose arguments changed: a waiter's offer carries its secret.
DROP FUNCTION IF EXISTS @S@.acquire("char", text, text, text, text, bigint, boolean, bigint,
    bigint, bigint, boolean, text);
-- Version 12's, whose arguments changed: the plain lock's waiters are marked, in turn.
DROP FUNCTION IF EXISTS @S@._acquire_e(text, text, bigint, boolean, timestamptz);
DROP FUNCTION IF EXISTS @S@.hand_over(text, text, text, bigint, bigint, boolean, bigint, text);
CREATE INDEX IF NOT EXISTS waiters_in_order ON @S@.waiters (name, seq);
CREATE SEQUENCE IF NOT EXISTS @S@.waiter_seq;

-- The last fencing token of each fenced lock name; kept after the lock is released.
CREATE @UNLOGGED@TABLE IF NOT EXISTS @S@.fences (
    name  text COLLATE "C" PRIMARY KEY,
    token bigint NOT NULL
);

-- Each client's record: who it is (name, host, pid) and its holds with when each was taken
-- (holds[i] taken at since_us[i], Unix microseconds), replaced whole by the client at each
-- publication; a record past expires_at is a client that stopped refreshing it (it died).
-- Read by inspection to say who holds a lock; no lock step reads it.
CREATE @UNLOGGED@TABLE IF NOT EXISTS @S@.clients (
    id         text COLLATE "C" PRIMARY KEY,
    name       text NOT NULL,
    host       text NOT NULL,
    pid        integer NOT NULL,
    holds      text[] NOT NULL,
    since_us   bigint[] NOT NULL,
    expires_at timestamptz NOT NULL
);

-- What recent releases answered, by request id: a release sent again after its reply was lost
-- replays the answer instead of acting twice. Deleted by the next release on the same
-- connection, or once expired.
CREATE @UNLOGGED@TABLE IF NOT EXISTS @S@.latches (
    request    bigint PRIMARY KEY,
    results    smallint[] NOT NULL,
    expires_at timestamptz NOT NULL
);

-- The holds that ended without their owner's release (a reentrant or fenced hold whose lease ran
-- out; any hold force-unlocked), kept for 10 minutes: a release of such a hold sent again after
-- its reply was lost answers "not held" (0) from here, while a release sent again after the
-- first one removed the hold answers "released" (1), without a latch row per release; and an
-- acquire under the id of one (a copy of the request that made it, arriving late, or the
-- client's next acquire after one whose answer was lost) answers gone instead of making it
-- again: an ended hold stays ended, and a release sent again tells its two ends apart.
CREATE @UNLOGGED@TABLE IF NOT EXISTS @S@.lost_holds (
    name       text COLLATE "C" NOT NULL,
    owner      text COLLATE "C" NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
);
-- Version 5: forced marks a hold an operator force-unlocked, never made again under its id.
ALTER TABLE @S@.lost_holds ADD COLUMN IF NOT EXISTS forced boolean NOT NULL DEFAULT false;

-- Microseconds from p_now until p_until, rounded up; 0 if it has passed.
CREATE OR REPLACE FUNCTION @S@._left(p_until timestamptz, p_now timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_until > p_now
                THEN ceil(extract(epoch FROM (p_until - p_now)) * 1000000)::bigint
                ELSE 0 END
$$;

-- p_now plus p_us microseconds.
-- STABLE, as its body is (timestamptz + interval): PostgreSQL does not inline a SQL function
-- whose body is more volatile than declared, and called this one (planning it again in each
-- transaction, some 30-40 µs) when it was declared IMMUTABLE.
CREATE OR REPLACE FUNCTION @S@._after(p_now timestamptz, p_us bigint) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT p_now + p_us * interval '1 microsecond'
$$;

-- What a release of lock p_name announces: 'r' and the name, or 'h' and its SHA-256 when it is
-- long.
CREATE OR REPLACE FUNCTION @S@._key(p_name text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN octet_length(p_name) <= 200 THEN 'r' || p_name
                ELSE 'h' || encode(sha256(convert_to(p_name, 'UTF8')), 'hex') END
$$;

-- A fair waiter's own key: the SHA-256 of the lock's name, a zero byte, and its owner id.
CREATE OR REPLACE FUNCTION @S@._waiter_key(p_name text, p_owner text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT encode(sha256(convert_to(p_name, 'UTF8') || '\x00'::bytea
                         || convert_to(p_owner, 'UTF8')), 'hex')
$$;

CREATE OR REPLACE FUNCTION @S@._announce(p_payload text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_notify('@CHANNEL@', p_payload)
$$;

-- The channel of the client a waiter id belongs to (the id up to its last `:`), where its
-- process listens for what is said to that waiter alone: `dlock:` and 40 hex digits of
-- SHA-256(schema, NUL, client), as the backend's listener computes it.
CREATE OR REPLACE FUNCTION @S@._client_channel(p_owner text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT 'dlock:' || left(encode(sha256(convert_to('@CHANNEL@', 'UTF8') || '\x00'::bytea
                                          || convert_to(regexp_replace(p_owner, ':[^:]*$', ''),
                                                        'UTF8')), 'hex'), 40)
$$;

-- Tells one waiter (a fair lock's head or the one behind it), on its client's channel: only
-- that process's listener hears it, not every process listening to the schema.
CREATE OR REPLACE FUNCTION @S@._announce_to(p_owner text, p_payload text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_notify(@S@._client_channel(p_owner), p_payload)
$$;

-- Whether row r is in use at p_now: held, read, with live waiters queued, a semaphore whose
-- permits were set (it stays one), or a latch not open.
CREATE OR REPLACE FUNCTION @S@._in_use(r @S@.locks, p_now timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT (r.owner IS NOT NULL AND r.expires_at > p_now)
        OR r.read_until > p_now
        OR (r.family = 'f' AND EXISTS (
                SELECT 1 FROM @S@.waiters w WHERE w.name = r.name AND w.timeout_at > p_now))
        OR (r.family = 's' AND (r.counter IS NOT NULL OR EXISTS (
                SELECT 1 FROM @S@.permits p WHERE p.name = r.name AND p.expires_at > p_now)))
        OR (r.family = 'l' AND r.counter > 0)
$$;

-- The family a lock kind lives in.
CREATE OR REPLACE FUNCTION @S@._family(p_kind "char") RETURNS "char"
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_kind WHEN 'f' THEN 'f' WHEN 'r' THEN 'w' WHEN 'w' THEN 'w' WHEN 's' THEN 's'
                       WHEN 'l' THEN 'l' WHEN 'n' THEN 'n' ELSE 'e' END::"char"
$$;

-- What family p_family is, in words.
CREATE OR REPLACE FUNCTION @S@._family_name(p_family "char") RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_family
        WHEN 'e' THEN 'a reentrant or fenced lock'
        WHEN 'f' THEN 'a fair lock'
        WHEN 's' THEN 'a semaphore'
        WHEN 'l' THEN 'a count-down latch'
        WHEN 'n' THEN 'a leader election'
        ELSE 'a read-write lock' END
$$;

-- Raises DL001 (the name is in use as another kind of lock) for family p_family.
CREATE OR REPLACE FUNCTION @S@._wrong_kind(p_family "char") RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'DL001', MESSAGE = @S@._family_name(p_family);
END
$$;

-- The code of a step refused because the name is in use as family p_family: -1 to -6.
CREATE OR REPLACE FUNCTION @S@._wrong_code(p_family "char") RETURNS smallint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_family WHEN 'e' THEN -1 WHEN 'f' THEN -2 WHEN 's' THEN -4 WHEN 'l' THEN -5
                         WHEN 'n' THEN -6 ELSE -3 END::smallint
$$;

-- What a release that found no hold of p_owner answers: 0, whatever the name is in use as
-- now. A hold's id is its own, so a release (even one that arrives late, after the name was
-- taken as another kind) names that hold alone, and changes nothing when it is gone.
CREATE OR REPLACE FUNCTION @S@._not_held(p_name text, p_family "char", p_now timestamptz)
RETURNS smallint
LANGUAGE sql IMMUTABLE AS $$
    SELECT 0::smallint
$$;

-- Notes that p_owner's reentrant or fenced hold on p_name ended without its release, for ten
-- minutes from now: a row left from an earlier end, past its time but not yet deleted, is
-- made current again (an acquire that finds its own hold ended answers gone by it).
CREATE OR REPLACE FUNCTION @S@._lost(p_name text, p_owner text, p_now timestamptz) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO @S@.lost_holds AS l (name, owner, expires_at)
    VALUES (p_name, p_owner, p_now + interval '10 minutes')
    ON CONFLICT (name, owner) DO UPDATE
        SET expires_at = greatest(l.expires_at, excluded.expires_at)
$$;

-- Notes that p_owner's hold on p_name was force-unlocked (kept ten minutes): never made again.
CREATE OR REPLACE FUNCTION @S@._forced(p_name text, p_owner text, p_now timestamptz)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO @S@.lost_holds (name, owner, expires_at, forced)
    VALUES (p_name, p_owner, p_now + interval '10 minutes', true)
    ON CONFLICT (name, owner) DO UPDATE SET forced = true, expires_at = excluded.expires_at
$$;

-- Whether p_owner's hold on p_name ended without its release (noted by _lost or _forced): an
-- acquire under its id (a copy of the request that made it, arriving late, or the client's
-- next acquire after one whose answer was lost) must not make it again, and answers gone.
-- Every acquire asks it first. PL/pgSQL, not SQL: a SQL function with a subquery is not
-- inlined, and its query was planned again in every transaction (about 0.1 ms of a pair);
-- PL/pgSQL keeps the plan for the session.
CREATE OR REPLACE FUNCTION @S@._ended(p_name text, p_owner text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM @S@.lost_holds l
                    WHERE l.name = p_name AND l.owner = p_owner AND l.expires_at > p_now);
END
$$;

-- Asked again by an acquire once it has taken the name (its row locked, or inserted): an end
-- noted after the acquire's first look (a force-unlock it waited behind, which deleted the
-- row its insert then made again) would else be undone. Raises DL004 when the hold ended:
-- the step rolls back, and the client answers gone (p_at: 0, or in a batch the acquire's place
-- from 1: the client answers it gone and sends the others again). Returns true.
CREATE OR REPLACE FUNCTION @S@._unless_ended(p_name text, p_owner text, p_at integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF @S@._ended(p_name, p_owner, clock_timestamp()) THEN
        RAISE EXCEPTION USING ERRCODE = 'DL004',
            MESSAGE = 'the hold ended while the step that makes it ran', DETAIL = p_at::text;
    END IF;
    RETURN true;
END
$$;

-- What a release sent again, that found no hold of p_owner, answers: 1 when the hold ended by
-- the first attempt (the release whose reply was lost), 0 when it had ended before, unreleased.
CREATE OR REPLACE FUNCTION @S@._released_before(p_name text, p_owner text) RETURNS smallint
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM @S@.lost_holds l
                              WHERE l.name = p_name AND l.owner = p_owner)
                THEN 0 ELSE 1 END::smallint
$$;

-- The next fencing token of p_name: one more than the last, or the server's clock in
-- microseconds if that is higher (a counter lost in a crash or behind after a failover still
-- hands out tokens above every earlier one, as long as clocks do not go back).
-- PL/pgSQL for its plan kept for the session (see _ended): every fenced acquire calls it.
CREATE OR REPLACE FUNCTION @S@._next_token(p_name text, p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_token bigint;
BEGIN
    INSERT INTO @S@.fences AS f (name, token)
    VALUES (p_name, greatest(1, floor(extract(epoch FROM p_now) * 1000000)::bigint))
    ON CONFLICT (name) DO UPDATE SET token = greatest(f.token + 1, excluded.token)
    RETURNING token INTO v_token;
    RETURN v_token;
END
$$;

-- Drops the waiters at the head of p_name's queue whose place timed out.
CREATE OR REPLACE FUNCTION @S@._purge_heads(p_name text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_owner text;
    v_timeout timestamptz;
BEGIN
    LOOP
        SELECT w.owner, w.timeout_at INTO v_owner, v_timeout
          FROM @S@.waiters w WHERE w.name = p_name ORDER BY w.seq LIMIT 1;
        EXIT WHEN NOT FOUND OR v_timeout > p_now;
        DELETE FROM @S@.waiters w WHERE w.name = p_name AND w.owner = v_owner;
        PERFORM @S@._drop_secrets(p_name, v_owner);
    END LOOP;
END
$$;

-- Wakes the first p_count waiters of p_name's queue, each on its own key and its client's
-- channel.
CREATE OR REPLACE FUNCTION @S@._wake_queue(p_name text, p_count integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_owner text;
BEGIN
    FOR v_owner IN SELECT w.owner FROM @S@.waiters w WHERE w.name = p_name
                   ORDER BY w.seq LIMIT p_count LOOP
        PERFORM @S@._announce_to(v_owner, 'w' || @S@._waiter_key(p_name, v_owner));
    END LOOP;
END
$$;

-- Tells the head of p_name's queue, on its client's channel, that the grant just made runs out
-- p_after_us from now, as 'd<µs>:<its key>': should the granted waiter be dead, the lock is
-- the head's then. Its client wakes it then (unless woken before), so it does not look now,
-- to be refused while the granted waiter claims.
CREATE OR REPLACE FUNCTION @S@._remind_head(p_name text, p_after_us bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_owner text;
BEGIN
    SELECT w.owner INTO v_owner FROM @S@.waiters w WHERE w.name = p_name ORDER BY w.seq LIMIT 1;
    IF FOUND THEN
        PERFORM @S@._announce_to(v_owner,
                                 'd' || p_after_us || ':' || @S@._waiter_key(p_name, v_owner));
    END IF;
END
$$;

-- Whether this session's role may use the offers' secrets: the schema's owner, or a lock user
-- granted them (`dlock postgres-schema --grant-to`). A lock user granted the lock schema only
-- (before version 12) works on without them: its waiters claim their grants.
-- Answers false, not an error, if an operator dropped them.
CREATE OR REPLACE FUNCTION @S@._uses_secrets() RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN to_regnamespace('@SECRETS@') IS NULL
                  OR NOT has_schema_privilege(to_regnamespace('@SECRETS@'), 'USAGE')
                  OR to_regclass('@SECRETS@.offers') IS NULL THEN false
                ELSE has_table_privilege(to_regclass('@SECRETS@.offers'), 'SELECT')
                     AND has_table_privilege(to_regclass('@SECRETS@.offers'), 'INSERT')
                     AND has_table_privilege(to_regclass('@SECRETS@.offers'), 'UPDATE')
                     AND has_table_privilege(to_regclass('@SECRETS@.offers'), 'DELETE') END
$$;

-- Whether the offers' secrets are kept from the locks' readers: no role (PUBLIC included) may
-- read the secrets' table unless it may also update the locks (and so could take any lock
-- anyway). Asked when a secret is to be kept: a grant of the secrets' table to a reader turns
-- the proofs off from each waiter's next attempt on.
-- PL/pgSQL for its plan kept for the session: as SQL (a subquery is not inlined) it was planned
-- again at each call, some 150 µs.
CREATE OR REPLACE FUNCTION @S@._secrets_kept() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN NOT EXISTS (
        SELECT 1 FROM pg_class c, aclexplode(c.relacl) a
         WHERE c.oid = '@SECRETS@.offers'::regclass
           AND a.privilege_type = 'SELECT'
           AND (a.grantee = 0
                OR NOT has_table_privilege(a.grantee, '@S@.locks'::regclass, 'UPDATE')));
END
$$;

-- Keeps p_secret, the secret of waiter p_waiter's offer on p_name made by attempt p_attempt as
-- the hold p_hold, in place of its earlier one, if this role may (_uses_secrets) and no reader
-- of the locks may read it (_secrets_kept); else the offer has none, and its grant comes
-- without a proof.
CREATE OR REPLACE FUNCTION @S@._keep_secret(p_name text, p_waiter text, p_attempt bigint,
    p_hold text, p_secret text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- In turn: the second reads the table's ACL, which needs the first.
    IF NOT @S@._uses_secrets() THEN
        RETURN;
    END IF;
    IF @S@._secrets_kept() THEN
        INSERT INTO @SECRETS@.offers AS o (name, waiter, attempt, hold, secret)
        VALUES (p_name, p_waiter, p_attempt, p_hold, p_secret)
        ON CONFLICT (name, waiter) DO UPDATE
           SET attempt = excluded.attempt, hold = excluded.hold, secret = excluded.secret;
    END IF;
END
$$;

-- Takes the secret of waiter p_waiter's offer on p_name if the hold p_hold holds p_name now
-- (the grant was made, in the caller's transaction) and that offer is attempt p_attempt's, as
-- p_hold, and answers it; else NULL.
CREATE OR REPLACE FUNCTION @S@._grant_proof(p_name text, p_waiter text, p_attempt bigint,
    p_hold text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_secret text;
BEGIN
    IF NOT @S@._uses_secrets()
       OR NOT EXISTS (SELECT 1 FROM @S@.locks l WHERE l.name = p_name AND l.owner = p_hold
                         AND l.expires_at > clock_timestamp()) THEN
        RETURN NULL;
    END IF;
    DELETE FROM @SECRETS@.offers o
     WHERE o.name = p_name AND o.waiter = p_waiter AND o.attempt = p_attempt AND o.hold = p_hold
    RETURNING o.secret INTO v_secret;
    RETURN v_secret;
END
$$;

-- Drops the secret of waiter p_waiter's offer on p_name (of every waiter's, if NULL): the
-- waiter left the queue without a grant (it took the lock itself, gave up, was dropped as
-- dead, or the name went to another kind).
CREATE OR REPLACE FUNCTION @S@._drop_secrets(p_name text, p_waiter text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF @S@._uses_secrets() THEN
        DELETE FROM @SECRETS@.offers o
         WHERE o.name = p_name AND (p_waiter IS NULL OR o.waiter = p_waiter);
    END IF;
END
$$;

-- Drops the secrets of offers whose waiter left the queue without its own step doing so (its
-- place timed out and was purged).
CREATE OR REPLACE FUNCTION @S@._purge_secrets() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF @S@._uses_secrets() THEN
        DELETE FROM @SECRETS@.offers o
         WHERE NOT EXISTS (SELECT 1 FROM @S@.waiters w
                            WHERE w.name = o.name AND w.owner = o.waiter);
    END IF;
END
$$;

-- Takes row p_name, found idle as another family, for family p_family: whatever its old family
-- left (dead readers, waiters or permits) goes.
CREATE OR REPLACE FUNCTION @S@._convert(p_name text, p_family "char") RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @S@._lost(l.name, l.owner, clock_timestamp()) FROM @S@.locks l
      WHERE l.name = p_name AND l.family = 'e' AND l.owner IS NOT NULL;
    DELETE FROM @S@.readers WHERE name = p_name;
    DELETE FROM @S@.waiters WHERE name = p_name;
    PERFORM @S@._drop_secrets(p_name, NULL);
    DELETE FROM @S@.permits WHERE name = p_name;
    UPDATE @S@.locks SET family = p_family, owner = NULL, holds = 0,
                         expires_at = '-infinity', read_until = '-infinity',
                         counter = NULL, value = NULL
     WHERE name = p_name;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Acquire. Each answers (o_acquired, o_remaining, o_token, o_found): taken (with the fencing
-- token for a fenced lock); or refused, with how long to wait at most before trying again
-- (the holder's remaining lease); or o_found = the family the name is in use as, when it is
-- another kind of lock.
-- ---------------------------------------------------------------------------------------------

-- The first live mark of p_name's plain lock's waiters if it is not p_waiter's: when it lives
-- until (marks that ran out are left for the next take or purge to delete). NULL: nobody
-- else's turn, a free lock is p_waiter's to take.
CREATE OR REPLACE FUNCTION @S@._turn_of_other(p_name text, p_waiter text, p_now timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN w.owner <> p_waiter THEN w.until END
      FROM @S@.lock_waiters w
     WHERE w.name = p_name AND w.until > p_now
     ORDER BY w.seq LIMIT 1
$$;

-- A plain lock's waiter refused: if it will wait (p_wait), p_waiter is marked for p_slot_us,
-- in its place if it has one, else after the others. A mark that lives half a slot more is
-- left as it is: the waiter tries again within half a slot, and most refusals write nothing.
CREATE OR REPLACE FUNCTION @S@._mark_lock_waiter(p_name text, p_waiter text, p_wait boolean,
    p_slot_us bigint, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_wait AND NOT EXISTS (
            SELECT 1 FROM @S@.lock_waiters w
             WHERE w.name = p_name AND w.owner = p_waiter
               AND w.until >= @S@._after(p_now, p_slot_us / 2)) THEN
        INSERT INTO @S@.lock_waiters AS w (name, owner, seq, until)
        VALUES (p_name, p_waiter, nextval('@S@.waiter_seq'), @S@._after(p_now, p_slot_us))
        ON CONFLICT (name, owner) DO UPDATE
           SET until = excluded.until,
               -- A mark that ran out is a new wait: at the end.
               seq = CASE WHEN w.until > p_now THEN w.seq ELSE excluded.seq END;
    END IF;
END
$$;

-- The plain lock's waiter p_waiter took p_name (its row is there, locked): its mark goes, and
-- so do marks that ran out; if other waiters are marked, the hold's release is announced to
-- them.
CREATE OR REPLACE FUNCTION @S@._unmark_lock_waiter(p_name text, p_waiter text,
    p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM @S@.lock_waiters w
     WHERE w.name = p_name AND (w.owner = p_waiter OR w.until <= p_now);
    IF EXISTS (SELECT 1 FROM @S@.lock_waiters w WHERE w.name = p_name AND w.until > p_now) THEN
        UPDATE @S@.locks SET contended = true WHERE name = p_name AND NOT contended;
    END IF;
END
$$;

-- A plain lock left free (released, forced open, or a waiter gone while it was free): told on
-- the channel of the client of the waiter marked first alone, as a fair lock's head is told (a
-- waiter of another client would be refused by that one's turn, so none is woken); with no
-- live mark, on the schema's channel if the lock was contended (p_contended).
CREATE OR REPLACE FUNCTION @S@._announce_free_e(p_name text, p_contended boolean,
    p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_first text;
BEGIN
    SELECT w.owner INTO v_first FROM @S@.lock_waiters w
     WHERE w.name = p_name AND w.until > p_now
     ORDER BY w.seq LIMIT 1;
    IF v_first IS NOT NULL THEN
        PERFORM @S@._announce_to(v_first, @S@._key(p_name));
    ELSIF p_contended THEN
        PERFORM @S@._announce(@S@._key(p_name));
    END IF;
END
$$;

-- The reentrant lock (p_fenced false) and the fenced lock: free (or expired) -> one hold and the
-- lease, if no other waiter is marked before p_waiter (else refused with the first mark's time
-- left, and p_waiter marked if it will wait, p_wait); held by this owner -> one hold more, the
-- lease extended to at least the one asked for (never shortened); held by another owner -> its
-- remaining lease, the row marked contended, p_waiter marked if it will wait.
CREATE OR REPLACE FUNCTION @S@._acquire_e(p_name text, p_owner text, p_waiter text,
    p_lease_us bigint, p_fenced boolean, p_wait boolean, p_slot_us bigint, p_now timestamptz,
    OUT o_acquired boolean, OUT o_remaining bigint, OUT o_token bigint, OUT o_found "char")
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz := @S@._after(p_now, p_lease_us);
    v_turn timestamptz := @S@._turn_of_other(p_name, p_waiter, p_now);
    r @S@.locks;
BEGIN
    o_acquired := false;
    FOR attempt IN 1..3 LOOP
        IF v_turn IS NULL THEN
            INSERT INTO @S@.locks (name, family, owner, holds, expires_at)
            VALUES (p_name, 'e', p_owner, 1, v_exp)
            ON CONFLICT (name) DO NOTHING;
            IF FOUND THEN
                PERFORM @S@._unmark_lock_waiter(p_name, p_waiter, p_now);
                o_acquired := true;
                IF p_fenced THEN
                    o_token := @S@._next_token(p_name, p_now);
                END IF;
                RETURN;
            END IF;
        END IF;
        -- Held by another owner and already marked: refused without taking the row.
        SELECT * INTO r FROM @S@.locks WHERE name = p_name;
        IF FOUND AND r.family = 'e' AND r.owner <> p_owner AND r.expires_at > p_now
           AND r.contended THEN
            PERFORM @S@._mark_lock_waiter(p_name, p_waiter, p_wait, p_slot_us, p_now);
            o_remaining := @S@._left(r.expires_at, p_now);
            RETURN;
        END IF;
        IF v_turn IS NOT NULL AND NOT FOUND THEN
            -- Free, another waiter's turn: refused without taking a row. The release of the
            -- hold that waiter takes is announced while a mark lives (see _release_e).
            PERFORM @S@._mark_lock_waiter(p_name, p_waiter, p_wait, p_slot_us, p_now);
            o_remaining := @S@._left(v_turn, p_now);
            RETURN;
        END IF;
        SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
        CONTINUE WHEN NOT FOUND;  -- released meanwhile
        IF r.family <> 'e' THEN
            IF @S@._in_use(r, p_now) THEN
                o_found := r.family;
                RETURN;
            END IF;
            PERFORM @S@._convert(p_name, 'e');
            r.owner := NULL;
        END IF;
        IF r.owner = p_owner AND r.expires_at > p_now THEN
            UPDATE @S@.locks SET holds = holds + 1, expires_at = greatest(expires_at, v_exp)
             WHERE name = p_name;
            o_acquired := true;
            IF p_fenced THEN
                SELECT f.token INTO o_token FROM @S@.fences f WHERE f.name = p_name;
                o_token := coalesce(o_token, 0);
            END IF;
            RETURN;
        END IF;
        IF r.owner IS NOT NULL AND r.expires_at > p_now THEN
            IF NOT r.contended THEN
                UPDATE @S@.locks SET contended = true WHERE name = p_name;
            END IF;
            PERFORM @S@._mark_lock_waiter(p_name, p_waiter, p_wait, p_slot_us, p_now);
            o_remaining := @S@._left(r.expires_at, p_now);
            RETURN;
        END IF;
        -- Free: released, or the holder's lease ran out. Waiters may still be marked: the flag
        -- stays.
        IF r.owner IS NOT NULL THEN
            PERFORM @S@._lost(p_name, r.owner, p_now);
            IF r.owner = p_owner THEN
                -- Its own hold, ended: not made again (the caller finds it gone).
                o_remaining := 0;
                RETURN;
            END IF;
        END IF;
        -- Looked at again under the row's lock: a waiter marked meanwhile goes first too.
        v_turn := @S@._turn_of_other(p_name, p_waiter, p_now);
        IF v_turn IS NOT NULL THEN
            UPDATE @S@.locks SET owner = NULL, contended = true WHERE name = p_name;
            PERFORM @S@._mark_lock_waiter(p_name, p_waiter, p_wait, p_slot_us, p_now);
            o_remaining := @S@._left(v_turn, p_now);
            RETURN;
        END IF;
        UPDATE @S@.locks SET owner = p_owner, holds = 1, expires_at = v_exp
         WHERE name = p_name;
        PERFORM @S@._unmark_lock_waiter(p_name, p_waiter, p_now);
        o_acquired := true;
        IF p_fenced THEN
            o_token := @S@._next_token(p_name, p_now);
        END IF;
        RETURN;
    END LOOP;
    -- Taken and released three times while this step ran: the caller tries again.
    o_remaining := 0;
END
$$;

-- The fair lock, for the hold p_owner of the waiter p_waiter. Free, and this waiter at the head
-- of the queue (or nobody queued) -> take it, leave the queue, and re-anchor the time-outs of
-- the waiters behind at its lease end. Held by this hold -> one hold more (never shortened; the
-- waiters' time-outs move with the lease). Else, if the caller waits and is not queued yet,
-- join the queue with a time-out one slot after the place ahead of it (or the holder's lease
-- end); the grant offer of this attempt replaces the waiter's earlier one. Answers how long to
-- wait at most: until the holder's lease ends or the head's place times out, whichever comes
-- first (at least 1 ms).
CREATE OR REPLACE FUNCTION @S@._acquire_f(p_name text, p_owner text, p_waiter text,
    p_lease_us bigint, p_wait boolean, p_slot_us bigint, p_grant_us bigint, p_wait_id bigint,
    p_now timestamptz,
    OUT o_acquired boolean, OUT o_remaining bigint, OUT o_token bigint, OUT o_found "char")
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz := @S@._after(p_now, p_lease_us);
    r @S@.locks;
    v_live boolean;
    v_head text;
    v_head_timeout timestamptz;
    v_mine timestamptz;
    v_ahead timestamptz;
    v_hint bigint;
BEGIN
    o_acquired := false;
    INSERT INTO @S@.locks (name, family, owner, holds, expires_at)
    VALUES (p_name, 'f', p_owner, 1, v_exp)
    ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
        o_acquired := true;
        RETURN;
    END IF;
    SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        -- Released and deleted meanwhile: the caller tries again at once.
        o_remaining := 0;
        RETURN;
    END IF;
    IF r.family <> 'f' THEN
        IF @S@._in_use(r, p_now) THEN
            o_found := r.family;
            RETURN;
        END IF;
        PERFORM @S@._convert(p_name, 'f');
        r.owner := NULL;
    END IF;
    v_live := r.owner IS NOT NULL AND r.expires_at > p_now;
    IF v_live AND r.owner = p_owner THEN
        -- Its own hold (a grant claimed, a re-entry): the queue is not looked at.
        UPDATE @S@.locks SET holds = holds + 1, expires_at = greatest(expires_at, v_exp)
         WHERE name = p_name;
        IF v_exp > r.expires_at THEN
            UPDATE @S@.waiters SET timeout_at = timeout_at + (v_exp - r.expires_at)
             WHERE name = p_name;
        END IF;
        o_acquired := true;
        RETURN;
    END IF;
    PERFORM @S@._purge_heads(p_name, p_now);
    SELECT w.owner, w.timeout_at INTO v_head, v_head_timeout
      FROM @S@.waiters w WHERE w.name = p_name ORDER BY w.seq LIMIT 1;
    IF NOT v_live AND (v_head IS NULL OR v_head = p_waiter) THEN
        IF v_head = p_waiter THEN
            DELETE FROM @S@.waiters WHERE name = p_name AND owner = p_waiter;
            PERFORM @S@._drop_secrets(p_name, p_waiter);
            UPDATE @S@.waiters SET timeout_at = timeout_at + (v_exp - v_head_timeout)
             WHERE name = p_name;
        END IF;
        UPDATE @S@.locks SET owner = p_owner, holds = 1, expires_at = v_exp WHERE name = p_name;
        o_acquired := true;
        RETURN;
    END IF;
    SELECT w.timeout_at INTO v_mine FROM @S@.waiters w
     WHERE w.name = p_name AND w.owner = p_waiter;
    IF NOT FOUND AND p_wait THEN
        SELECT w.timeout_at INTO v_ahead FROM @S@.waiters w
         WHERE w.name = p_name ORDER BY w.seq DESC LIMIT 1;
        IF NOT FOUND THEN
            v_ahead := CASE WHEN v_live THEN r.expires_at ELSE p_now END;
        END IF;
        INSERT INTO @S@.waiters (name, owner, seq, timeout_at, grant_lease_us, wait_id, hold)
        VALUES (p_name, p_waiter, nextval('@S@.waiter_seq'), @S@._after(v_ahead, p_slot_us),
                p_grant_us, p_wait_id, p_owner);
        IF v_head IS NULL THEN
            v_head := p_waiter;
        END IF;
    ELSIF FOUND THEN
        UPDATE @S@.waiters SET grant_lease_us = p_grant_us, wait_id = p_wait_id, hold = p_owner
         WHERE name = p_name AND owner = p_waiter;
    END IF;
    IF v_live THEN
        v_hint := @S@._left(r.expires_at, p_now);
    END IF;
    IF v_head IS NOT NULL AND v_head <> p_waiter THEN
        v_hint := least(coalesce(v_hint, 9223372036854775807), @S@._left(v_head_timeout, p_now));
    END IF;
    o_remaining := greatest(coalesce(v_hint, p_slot_us), 1000);
END
$$;

-- The read side of a read-write lock: no live writer, or a writer that is the caller's own
-- write hold p_writer (a writer may read) -> one read hold more for the hold p_owner, its lease
-- extended to at least the one asked for; else the writer's remaining lease. Refused by a
-- writer's hold, a reader that will wait (p_wait) marks its waiter p_waiter for p_slot_us: it
-- goes in before the next writer. While a waiting writer's mark lives, a reader with no mark of
-- its own that does not read already (and is not next to its own write hold) is refused until
-- the last writer's mark runs out. A reader that goes in on its mark marks the row contended:
-- a writer may have been refused for it meanwhile (the lock free, the reader's mark there), in
-- a transaction this one did not see, and waits for this reader's release to be announced.
CREATE OR REPLACE FUNCTION @S@._acquire_r(p_name text, p_owner text, p_waiter text,
    p_writer text, p_lease_us bigint, p_wait boolean, p_slot_us bigint, p_now timestamptz,
    OUT o_acquired boolean, OUT o_remaining bigint, OUT o_token bigint, OUT o_found "char")
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz := @S@._after(p_now, p_lease_us);
    r @S@.locks;
    v_marked timestamptz;
    v_turn boolean;
BEGIN
    o_acquired := false;
    SELECT max(w.until) INTO v_marked FROM @S@.rw_waiters w
     WHERE w.name = p_name AND w.side = 'w' AND w.until > p_now;
    v_turn := EXISTS (SELECT 1 FROM @S@.rw_waiters w
                       WHERE w.name = p_name AND w.side = 'r' AND w.owner = p_waiter
                         AND w.until > p_now);
    FOR attempt IN 1..3 LOOP
        IF v_marked IS NULL OR v_turn THEN
            INSERT INTO @S@.locks (name, family, owner, holds, expires_at, read_until, contended)
            VALUES (p_name, 'w', NULL, 0, '-infinity', v_exp, v_marked IS NOT NULL OR v_turn)
            ON CONFLICT (name) DO NOTHING;
            IF FOUND THEN
                INSERT INTO @S@.readers (name, owner, holds, expires_at)
                VALUES (p_name, p_owner, 1, v_exp)
                ON CONFLICT (name, owner) DO UPDATE SET holds = 1,
                    expires_at = excluded.expires_at;
                PERFORM @S@._unmark_reader(p_name, p_waiter, v_turn);
                o_acquired := true;
                RETURN;
            END IF;
        END IF;
        SELECT * INTO r FROM @S@.locks WHERE name = p_name;
        IF FOUND AND r.family = 'w' AND r.owner IS DISTINCT FROM p_writer
           AND r.expires_at > p_now AND r.contended AND NOT p_wait THEN
            o_remaining := @S@._left(r.expires_at, p_now);
            RETURN;
        END IF;
        SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
        IF NOT FOUND THEN
            IF v_marked IS NOT NULL AND NOT v_turn THEN
                o_remaining := @S@._left(v_marked, p_now);
                RETURN;
            END IF;
            CONTINUE;
        END IF;
        IF r.family <> 'w' THEN
            IF @S@._in_use(r, p_now) THEN
                o_found := r.family;
                RETURN;
            END IF;
            PERFORM @S@._convert(p_name, 'w');
            r.owner := NULL;
        END IF;
        IF r.owner IS NOT NULL AND r.owner IS DISTINCT FROM p_writer AND r.expires_at > p_now THEN
            IF NOT r.contended THEN
                UPDATE @S@.locks SET contended = true WHERE name = p_name;
            END IF;
            PERFORM @S@._mark_waiter(p_name, 'r', p_waiter, p_wait, p_slot_us, p_now);
            o_remaining := @S@._left(r.expires_at, p_now);
            RETURN;
        END IF;
        IF v_marked IS NOT NULL AND NOT v_turn AND NOT (r.owner IS NOT NULL AND r.expires_at > p_now)
           AND NOT EXISTS (SELECT 1 FROM @S@.readers h
                            WHERE h.name = p_name AND h.owner = p_owner
                              AND h.expires_at > p_now) THEN
            o_remaining := @S@._left(v_marked, p_now);
            RETURN;
        END IF;
        INSERT INTO @S@.readers AS h (name, owner, holds, expires_at)
        VALUES (p_name, p_owner, 1, v_exp)
        ON CONFLICT (name, owner) DO UPDATE SET
            holds = CASE WHEN h.expires_at > p_now THEN h.holds + 1 ELSE 1 END,
            expires_at = CASE WHEN h.expires_at > p_now THEN greatest(h.expires_at, v_exp)
                              ELSE v_exp END;
        UPDATE @S@.locks SET read_until = greatest(read_until, v_exp),
                             contended = contended OR v_marked IS NOT NULL OR v_turn
         WHERE name = p_name;
        PERFORM @S@._unmark_reader(p_name, p_waiter, v_turn);
        o_acquired := true;
        RETURN;
    END LOOP;
    o_remaining := 0;
END
$$;

-- The reader p_waiter went in: its mark (if it had one, p_marked) goes.
CREATE OR REPLACE FUNCTION @S@._unmark_reader(p_name text, p_waiter text, p_marked boolean)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_marked THEN
        DELETE FROM @S@.rw_waiters WHERE name = p_name AND side = 'r' AND owner = p_waiter;
    END IF;
END
$$;

-- The first live mark of p_name's waiting writers if it is not p_waiter's: when it lives until.
-- NULL: nobody else's turn, a free lock is p_waiter's to take.
CREATE OR REPLACE FUNCTION @S@._writer_turn_of_other(p_name text, p_waiter text,
    p_now timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN w.owner <> p_waiter THEN w.until END
      FROM @S@.rw_waiters w
     WHERE w.name = p_name AND w.side = 'w' AND w.until > p_now
     ORDER BY w.seq, w.owner LIMIT 1
$$;

-- The write side of a read-write lock: no live writer, no live reader, no reader marked as
-- waiting behind the last writer and no other writer marked first -> the write hold; held for
-- writing by this owner -> one hold more (never shortened); else the writer's remaining lease,
-- the longest reader's, the readers' marks' or the first writer's mark's. A reader may not
-- upgrade: its own read hold counts. A writer that will wait (p_wait), refused, marks its
-- waiter p_waiter as waiting for p_slot_us, in its place if it has one, else after the others
-- (see rw_waiters); taken, its mark goes, and its release is announced (the readers it held
-- off wait for it).
CREATE OR REPLACE FUNCTION @S@._acquire_w(p_name text, p_owner text, p_waiter text,
    p_lease_us bigint, p_wait boolean, p_slot_us bigint, p_now timestamptz,
    OUT o_acquired boolean, OUT o_remaining bigint, OUT o_token bigint, OUT o_found "char")
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz := @S@._after(p_now, p_lease_us);
    r @S@.locks;
    v_read timestamptz;
    v_readers_marked timestamptz;
    v_turn timestamptz;
BEGIN
    o_acquired := false;
    SELECT max(w.until) INTO v_readers_marked FROM @S@.rw_waiters w
     WHERE w.name = p_name AND w.side = 'r' AND w.until > p_now;
    v_turn := @S@._writer_turn_of_other(p_name, p_waiter, p_now);
    FOR attempt IN 1..3 LOOP
        IF v_readers_marked IS NULL AND v_turn IS NULL THEN
            INSERT INTO @S@.locks (name, family, owner, holds, expires_at)
            VALUES (p_name, 'w', p_owner, 1, v_exp)
            ON CONFLICT (name) DO NOTHING;
            IF FOUND THEN
                PERFORM @S@._unmark_writer(p_name, p_waiter);
                o_acquired := true;
                RETURN;
            END IF;
        END IF;
        SELECT * INTO r FROM @S@.locks WHERE name = p_name;
        IF FOUND AND r.family = 'w' AND r.owner <> p_owner AND r.expires_at > p_now
           AND r.contended AND NOT p_wait THEN
            o_remaining := @S@._left(r.expires_at, p_now);
            RETURN;
        END IF;
        SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
        IF NOT FOUND THEN
            IF v_readers_marked IS NOT NULL OR v_turn IS NOT NULL THEN
                -- Free, but readers that waited behind the last writer go first, then the
                -- writers in turn.
                o_remaining := @S@._left(coalesce(v_readers_marked, v_turn), p_now);
                PERFORM @S@._mark_waiter(p_name, 'w', p_waiter, p_wait, p_slot_us, p_now);
                RETURN;
            END IF;
            CONTINUE;
        END IF;
        -- Looked at again under the row's lock: a writer marked meanwhile goes first too.
        v_turn := @S@._writer_turn_of_other(p_name, p_waiter, p_now);
        IF r.family <> 'w' THEN
            IF @S@._in_use(r, p_now) THEN
                o_found := r.family;
                RETURN;
            END IF;
            PERFORM @S@._convert(p_name, 'w');
            r.owner := NULL;
        END IF;
        IF r.owner = p_owner AND r.expires_at > p_now THEN
            UPDATE @S@.locks SET holds = holds + 1, expires_at = greatest(expires_at, v_exp)
             WHERE name = p_name;
            o_acquired := true;
            RETURN;
        END IF;
        IF r.owner IS NOT NULL AND r.expires_at > p_now THEN
            o_remaining := @S@._left(r.expires_at, p_now);
        ELSE
            SELECT max(h.expires_at) INTO v_read FROM @S@.readers h
             WHERE h.name = p_name AND h.expires_at > p_now;
            IF v_read IS NOT NULL THEN
                o_remaining := @S@._left(v_read, p_now);
            ELSIF v_readers_marked IS NOT NULL THEN
                o_remaining := @S@._left(v_readers_marked, p_now);
            ELSIF v_turn IS NOT NULL THEN
                o_remaining := @S@._left(v_turn, p_now);
            END IF;
        END IF;
        IF o_remaining IS NOT NULL THEN
            IF NOT r.contended THEN
                UPDATE @S@.locks SET contended = true WHERE name = p_name;
            END IF;
            PERFORM @S@._mark_waiter(p_name, 'w', p_waiter, p_wait, p_slot_us, p_now);
            RETURN;
        END IF;
        DELETE FROM @S@.readers WHERE name = p_name;
        UPDATE @S@.locks SET owner = p_owner, holds = 1, expires_at = v_exp,
                             read_until = '-infinity'
         WHERE name = p_name;
        PERFORM @S@._unmark_writer(p_name, p_waiter);
        o_acquired := true;
        RETURN;
    END LOOP;
    o_remaining := 0;
END
$$;

-- A read-write waiter refused (p_side 'w' a writer, 'r' a reader behind a writer's hold): if
-- it will wait (p_wait), its waiter p_waiter is marked for p_slot_us, in its place if it has
-- one, else after the others.
CREATE OR REPLACE FUNCTION @S@._mark_waiter(p_name text, p_side "char", p_waiter text,
    p_wait boolean, p_slot_us bigint, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_wait THEN
        INSERT INTO @S@.rw_waiters AS w (name, side, owner, until, seq)
        VALUES (p_name, p_side, p_waiter, @S@._after(p_now, p_slot_us),
                nextval('@S@.waiter_seq'))
        ON CONFLICT (name, side, owner) DO UPDATE
           SET until = excluded.until,
               -- A mark that ran out is a new wait: at the end.
               seq = CASE WHEN w.until > p_now THEN w.seq ELSE excluded.seq END;
    END IF;
END
$$;

-- The writer p_waiter took p_name: its mark goes; if it had one, or another waiter is marked
-- (a writer that took the lock at its first try, past a marked one), waiters it held off wait,
-- and its release is announced.
CREATE OR REPLACE FUNCTION @S@._unmark_writer(p_name text, p_waiter text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM @S@.rw_waiters WHERE name = p_name AND side = 'w' AND owner = p_waiter;
    IF FOUND OR EXISTS (SELECT 1 FROM @S@.rw_waiters w
                         WHERE w.name = p_name AND w.until > clock_timestamp()) THEN
        UPDATE @S@.locks SET contended = true WHERE name = p_name AND NOT contended;
    END IF;
END
$$;

-- An extend of kind p_kind by the hold p_owner, which the client believes it has: the hold, if
-- the store still has it live, takes one hold more and a lease at least p_lease_us long (never
-- shortened; a fair lock's waiters' time-outs move with it), and answers taken (with the fenced
-- lock's or the leadership's token). An ended hold stays ended: one the store no longer has is
-- not made again, whoever holds the name now, and the answer is not taken (gone). A read
-- extended by p_waiter takes that waiter's mark away, as a new read hold's take does: the
-- reader that waited behind a writer's hold is in, and the next writer no longer waits for it.
CREATE OR REPLACE FUNCTION @S@._extend(p_kind "char", p_name text, p_owner text,
    p_waiter text, p_lease_us bigint, p_now timestamptz, OUT o_acquired boolean,
    OUT o_token bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz := @S@._after(p_now, p_lease_us);
    v_before timestamptz;
BEGIN
    o_acquired := false;
    CASE p_kind
        WHEN 'r' THEN
            UPDATE @S@.readers SET holds = holds + 1, expires_at = greatest(expires_at, v_exp)
             WHERE name = p_name AND owner = p_owner AND expires_at > p_now;
            IF FOUND THEN
                UPDATE @S@.locks SET read_until = greatest(read_until, v_exp)
                 WHERE name = p_name;
                o_acquired := true;
                PERFORM @S@._unmark_reader(p_name, p_waiter, true);
            END IF;
        WHEN 's' THEN
            UPDATE @S@.permits SET expires_at = greatest(expires_at, v_exp)
             WHERE name = p_name AND owner = p_owner AND expires_at > p_now;
            o_acquired := FOUND;
        WHEN 'l' THEN
            -- Nothing is held on a latch.
            RETURN;
        ELSE
            SELECT l.expires_at INTO v_before FROM @S@.locks l
             WHERE l.name = p_name AND l.family = @S@._family(p_kind) AND l.owner = p_owner
               AND l.expires_at > p_now
               FOR UPDATE;
            IF NOT FOUND THEN
                RETURN;
            END IF;
            UPDATE @S@.locks SET holds = holds + 1, expires_at = greatest(expires_at, v_exp)
             WHERE name = p_name;
            IF p_kind = 'f' AND v_exp > v_before THEN
                UPDATE @S@.waiters SET timeout_at = timeout_at + (v_exp - v_before)
                 WHERE name = p_name;
            END IF;
            IF p_kind IN ('t', 'n') THEN
                SELECT f.token INTO o_token FROM @S@.fences f WHERE f.name = p_name;
                o_token := coalesce(o_token, 0);
            END IF;
            o_acquired := true;
    END CASE;
END
$$;

-- One acquire of kind p_kind: 'e' reentrant, 't' fenced, 'f' fair, 'r' read, 'w' write,
-- 's' a semaphore's permit, 'l' passing a count-down latch (a leader's is acquire_leader), for
-- the hold p_owner (waiting in a fair lock's queue as p_waiter; reading next to its own write
-- hold p_writer).
CREATE OR REPLACE FUNCTION @S@._acquire(p_kind "char", p_name text, p_owner text,
    p_waiter text, p_writer text, p_lease_us bigint, p_wait boolean, p_slot_us bigint,
    p_grant_us bigint, p_wait_id bigint, p_now timestamptz,
    OUT o_acquired boolean, OUT o_remaining bigint, OUT o_token bigint, OUT o_found "char")
LANGUAGE plpgsql AS $$
BEGIN
    CASE p_kind
        WHEN 'e', 't' THEN
            SELECT * INTO o_acquired, o_remaining, o_token, o_found
              FROM @S@._acquire_e(p_name, p_owner, p_waiter, p_lease_us, p_kind = 't', p_wait,
                                  p_slot_us, p_now);
        WHEN 'f' THEN
            SELECT * INTO o_acquired, o_remaining, o_token, o_found
              FROM @S@._acquire_f(p_name, p_owner, p_waiter, p_lease_us, p_wait, p_slot_us,
                                  p_grant_us, p_wait_id, p_now);
        WHEN 'r' THEN
            SELECT * INTO o_acquired, o_remaining, o_token, o_found
              FROM @S@._acquire_r(p_name, p_owner, p_waiter, p_writer, p_lease_us, p_wait,
                                  p_slot_us, p_now);
        WHEN 's' THEN
            SELECT * INTO o_acquired, o_remaining, o_token, o_found
              FROM @S@._acquire_s(p_name, p_owner, p_lease_us, p_now);
        WHEN 'l' THEN
            SELECT * INTO o_acquired, o_remaining, o_token, o_found
              FROM @S@._acquire_l(p_name, p_now);
        WHEN 'w' THEN
            SELECT * INTO o_acquired, o_remaining, o_token, o_found
              FROM @S@._acquire_w(p_name, p_owner, p_waiter, p_lease_us, p_wait, p_slot_us,
                                  p_now);
        ELSE
            -- A leadership is taken with acquire_leader, which keeps its candidate id.
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('no acquire of kind %L here', p_kind);
    END CASE;
END
$$;

-- The acquire step. A refused acquire changed nothing that must survive a crash (a contended
-- mark, a place in a queue), so it commits without waiting for the disk.
-- p_reentry: an extend of the hold p_owner (see _extend), which answers taken or, for a hold
-- the store no longer has, not taken (gone).
CREATE OR REPLACE FUNCTION @S@.acquire(p_kind "char", p_name text, p_owner text,
    p_waiter text, p_writer text, p_lease_us bigint, p_wait boolean, p_slot_us bigint,
    p_grant_us bigint, p_wait_id bigint, p_reentry boolean, p_sync text,
    p_secret text DEFAULT NULL,
    OUT acquired boolean, OUT remaining_us bigint, OUT fencing_token bigint, OUT gone boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_found "char";
BEGIN
    gone := false;
    IF @S@._ended(p_name, p_owner, clock_timestamp()) THEN
        acquired := false;
        gone := true;
        PERFORM set_config('synchronous_commit', 'off', true);
        RETURN;
    END IF;
    IF p_reentry THEN
        SELECT * INTO acquired, fencing_token
          FROM @S@._extend(p_kind, p_name, p_owner, p_waiter, p_lease_us,
                            clock_timestamp());
        gone := NOT acquired;
        IF acquired THEN
            PERFORM @S@._unless_ended(p_name, p_owner, 0);
        END IF;
        PERFORM set_config('synchronous_commit', CASE WHEN acquired THEN p_sync ELSE 'off' END,
                           true);
        RETURN;
    END IF;
    IF p_kind IN ('e', 't') AND NOT EXISTS (
            SELECT 1 FROM @S@.lock_waiters w
             WHERE w.name = p_name AND w.until > clock_timestamp()) THEN
        -- The uncontended path (no waiter marked), without the dispatch.
        INSERT INTO @S@.locks (name, family, owner, holds, expires_at)
        VALUES (p_name, 'e', p_owner, 1, @S@._after(clock_timestamp(), p_lease_us))
        ON CONFLICT (name) DO NOTHING;
        IF FOUND THEN
            PERFORM @S@._unless_ended(p_name, p_owner, 0);
            acquired := true;
            IF p_kind = 't' THEN
                fencing_token := @S@._next_token(p_name, clock_timestamp());
            END IF;
            PERFORM set_config('synchronous_commit', p_sync, true);
            RETURN;
        END IF;
    END IF;
    SELECT * INTO acquired, remaining_us, fencing_token, v_found
      FROM @S@._acquire(p_kind, p_name, p_owner, p_waiter, p_writer, p_lease_us, p_wait,
                        p_slot_us, p_grant_us, p_wait_id, clock_timestamp());
    IF v_found IS NOT NULL THEN
        PERFORM @S@._wrong_kind(v_found);
    END IF;
    IF acquired THEN
        PERFORM @S@._unless_ended(p_name, p_owner, 0);
    ELSIF p_secret IS NOT NULL AND p_wait_id IS NOT NULL THEN
        -- A waiter's offer: the release that grants it sends this back as its proof.
        PERFORM @S@._keep_secret(p_name, p_waiter, p_wait_id, p_owner, p_secret);
    END IF;
    IF NOT acquired AND p_kind IN ('e', 't') THEN
        -- Refused by its own ended hold, which the step found and noted.
        gone := @S@._ended(p_name, p_owner, clock_timestamp());
    END IF;
    PERFORM set_config('synchronous_commit', CASE WHEN acquired THEN p_sync ELSE 'off' END, true);
END
$$;

-- Several acquires in one step, each as acquire makes it, answered in order. A name in use as
-- another kind fails the whole step (nothing is taken).
CREATE OR REPLACE FUNCTION @S@.acquire_many(p_kinds "char"[], p_names text[], p_owners text[],
    p_waiters text[], p_writers text[], p_leases_us bigint[], p_waits boolean[],
    p_slots_us bigint[], p_grants_us bigint[], p_wait_ids bigint[], p_reentries boolean[],
    p_sync text)
RETURNS TABLE (acquired boolean, remaining_us bigint, fencing_token bigint, gone boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_found "char";
    v_any boolean := false;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        v_found := NULL;
        remaining_us := NULL;
        fencing_token := NULL;
        gone := false;
        IF @S@._ended(p_names[i], p_owners[i], v_now) THEN
            acquired := false;
            gone := true;
        ELSIF p_reentries[i] THEN
            SELECT * INTO acquired, fencing_token
              FROM @S@._extend(p_kinds[i], p_names[i], p_owners[i], p_waiters[i],
                                p_leases_us[i], v_now);
            gone := NOT acquired;
        ELSE
            SELECT * INTO acquired, remaining_us, fencing_token, v_found
              FROM @S@._acquire(p_kinds[i], p_names[i], p_owners[i], p_waiters[i],
                                p_writers[i], p_leases_us[i], p_waits[i], p_slots_us[i],
                                p_grants_us[i], p_wait_ids[i], v_now);
            IF NOT acquired AND p_kinds[i] IN ('e', 't') THEN
                -- Refused by its own ended hold, which the step found and noted.
                gone := @S@._ended(p_names[i], p_owners[i], v_now);
            END IF;
        END IF;
        IF acquired THEN
            -- The whole batch rolls back; the client sends it again without this acquire.
            PERFORM @S@._unless_ended(p_names[i], p_owners[i], i);
        END IF;
        IF v_found IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'DL001', MESSAGE = @S@._family_name(v_found),
                DETAIL = i::text;
        END IF;
        v_any := v_any OR acquired;
        RETURN NEXT;
    END LOOP;
    PERFORM set_config('synchronous_commit', CASE WHEN v_any THEN p_sync ELSE 'off' END, true);
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Release. Each answers 1 (the owner's whole hold removed, its waiters announced), 0 (not held
-- by this owner: nothing changed), or a negative wrong-kind code.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION @S@._release_e(p_name text, p_owner text, p_now timestamptz)
RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    v_live boolean;
    v_contended boolean;
BEGIN
    DELETE FROM @S@.locks
     WHERE name = p_name AND owner = p_owner AND family = 'e'
    RETURNING expires_at > p_now, contended INTO v_live, v_contended;
    IF NOT FOUND THEN
        RETURN @S@._not_held(p_name, 'e', p_now);
    END IF;
    PERFORM @S@._announce_free_e(p_name, v_contended, p_now);
    IF NOT v_live THEN
        PERFORM @S@._lost(p_name, p_owner, p_now);
        RETURN 0;
    END IF;
    RETURN 1;
END
$$;

-- The fair release: the lock is free for the head now, not at the lease's end, so every
-- waiter's time-out moves back by the lease left unused; dead heads are dropped. A head that
-- offered to take a grant leaves the queue and the hold of its offer becomes the holder on the
-- grant lease, the waiters behind are re-anchored at that lease's end, it is told with
-- 'g<attempt>:<its key>' (the attempt whose offer was granted), and the
-- waiter behind it is told when the grant runs out. Otherwise the head and the one behind it
-- are woken. The row goes when nobody is queued.
CREATE OR REPLACE FUNCTION @S@._release_f(p_name text, p_owner text, p_now timestamptz)
RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    r @S@.locks;
    v_head text;
    v_head_timeout timestamptz;
    v_grant bigint;
    v_wait_id bigint;
    v_hold text;
    v_exp timestamptz;
BEGIN
    SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
    IF NOT FOUND OR r.family <> 'f' OR r.owner IS DISTINCT FROM p_owner
       OR r.expires_at <= p_now THEN
        RETURN @S@._not_held(p_name, 'f', p_now);
    END IF;
    -- The time-outs are moved once, below: until then a head is dead if its time-out, moved
    -- back by the unused lease, has passed (is not past the lease's end).
    PERFORM @S@._purge_heads(p_name, r.expires_at);
    SELECT w.owner, w.timeout_at, w.grant_lease_us, w.wait_id, w.hold
      INTO v_head, v_head_timeout, v_grant, v_wait_id, v_hold
      FROM @S@.waiters w WHERE w.name = p_name ORDER BY w.seq LIMIT 1;
    IF NOT FOUND THEN
        DELETE FROM @S@.locks WHERE name = p_name;
        RETURN 1;
    END IF;
    IF v_grant IS NOT NULL AND v_hold IS NOT NULL THEN
        v_exp := @S@._after(p_now, v_grant);
        DELETE FROM @S@.waiters WHERE name = p_name AND owner = v_head;
        -- Back by the unused lease, then forward by what re-anchors the head's moved time-out
        -- at the grant lease's end: the two shifts sum to this.
        UPDATE @S@.waiters SET timeout_at = timeout_at + (v_exp - v_head_timeout)
         WHERE name = p_name;
        UPDATE @S@.locks SET owner = v_hold, holds = 1, expires_at = v_exp WHERE name = p_name;
        -- With the offer's secret, the grant is its own proof: the waiter believes it without
        -- a claim.
        PERFORM @S@._announce_to(v_head,
            'g' || v_wait_id || ':' || @S@._waiter_key(p_name, v_head)
            || coalesce(':' || @S@._grant_proof(p_name, v_head, v_wait_id, v_hold), ''));
        PERFORM @S@._remind_head(p_name, v_grant);
        RETURN 1;
    END IF;
    UPDATE @S@.waiters SET timeout_at = timeout_at - (r.expires_at - p_now) WHERE name = p_name;
    UPDATE @S@.locks SET owner = NULL, holds = 0, expires_at = '-infinity' WHERE name = p_name;
    PERFORM @S@._wake_queue(p_name, 2);
    RETURN 1;
END
$$;

-- The read release: this owner's whole share goes; the row goes with the last live reader
-- (unless a writer holds it), else it lives as long as the longest other reader. Only the
-- last live reader's release is announced: while readers remain, a waiting writer (or a lock
-- of another kind on the name) is still refused, and a waiting reader waits for writers only,
-- so a release announced then would wake them all for a refusal.
CREATE OR REPLACE FUNCTION @S@._release_r(p_name text, p_owner text, p_now timestamptz)
RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    r @S@.locks;
    v_live boolean;
    v_read timestamptz;
BEGIN
    SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
    IF NOT FOUND OR r.family <> 'w' THEN
        RETURN @S@._not_held(p_name, 'w', p_now);
    END IF;
    DELETE FROM @S@.readers WHERE name = p_name AND owner = p_owner
    RETURNING expires_at > p_now INTO v_live;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    SELECT max(h.expires_at) INTO v_read FROM @S@.readers h
     WHERE h.name = p_name AND h.expires_at > p_now;
    IF v_read IS NOT NULL THEN
        -- Still contended: the last reader's release announces it.
        UPDATE @S@.locks SET read_until = v_read WHERE name = p_name;
        RETURN CASE WHEN v_live THEN 1 ELSE 0 END;
    END IF;
    IF NOT (r.owner IS NOT NULL AND r.expires_at > p_now) THEN
        DELETE FROM @S@.readers WHERE name = p_name;
        DELETE FROM @S@.locks WHERE name = p_name;
    ELSE
        UPDATE @S@.locks SET read_until = '-infinity', contended = false
         WHERE name = p_name;
    END IF;
    IF r.contended THEN
        PERFORM @S@._announce(@S@._key(p_name));
    END IF;
    RETURN CASE WHEN v_live THEN 1 ELSE 0 END;
END
$$;

-- The write release: the write hold goes; the row too unless live readers remain (the writer
-- itself may read: a downgrade).
CREATE OR REPLACE FUNCTION @S@._release_w(p_name text, p_owner text, p_now timestamptz)
RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    r @S@.locks;
    v_read timestamptz;
BEGIN
    SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
    IF NOT FOUND OR r.family <> 'w' OR r.owner IS DISTINCT FROM p_owner
       OR r.expires_at <= p_now THEN
        RETURN @S@._not_held(p_name, 'w', p_now);
    END IF;
    SELECT max(h.expires_at) INTO v_read FROM @S@.readers h
     WHERE h.name = p_name AND h.expires_at > p_now;
    IF v_read IS NULL THEN
        DELETE FROM @S@.readers WHERE name = p_name;
        DELETE FROM @S@.locks WHERE name = p_name;
    ELSE
        UPDATE @S@.locks SET owner = NULL, holds = 0, expires_at = '-infinity',
                             read_until = v_read, contended = false
         WHERE name = p_name;
    END IF;
    IF r.contended THEN
        PERFORM @S@._announce(@S@._key(p_name));
    END IF;
    RETURN 1;
END
$$;

CREATE OR REPLACE FUNCTION @S@._release(p_kind "char", p_name text, p_owner text,
    p_now timestamptz) RETURNS smallint
LANGUAGE plpgsql AS $$
BEGIN
    RETURN CASE p_kind
        WHEN 'f' THEN @S@._release_f(p_name, p_owner, p_now)
        WHEN 'r' THEN @S@._release_r(p_name, p_owner, p_now)
        WHEN 'w' THEN @S@._release_w(p_name, p_owner, p_now)
        WHEN 's' THEN @S@._release_s(p_name, p_owner, p_now)
        WHEN 'n' THEN @S@._release_n(p_name, p_owner, p_now)
        WHEN 'l' THEN 0::smallint
        ELSE @S@._release_e(p_name, p_owner, p_now) END;
END
$$;

-- The latch of a latched step (a release of a kind other than reentrant and fenced, a
-- hand-over, a set-once counter step): the answer its first attempt latched, if this is that
-- request sent again (p_retry); NULL: the step is to run. Every attempt of a request holds the
-- request's advisory lock until it commits, so a copy sent again while the first attempt is
-- still at work (its connection failed under it while it waited for a row) waits for it, and
-- then finds its latch, instead of finding what it did and answering from that. A first
-- attempt that arrives after its copy (held up in the network) acts on nothing the copy left:
-- a release finds no hold, a set-once step finds the value set. p_forget: the latch of this
-- connection's previous latched step, whose answer arrived.
CREATE OR REPLACE FUNCTION @S@._latched(p_request bigint, p_retry boolean, p_forget bigint)
RETURNS smallint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_done smallint[];
BEGIN
    PERFORM pg_advisory_xact_lock(p_request);
    IF p_forget IS NOT NULL THEN
        DELETE FROM @S@.latches WHERE request = p_forget;
    END IF;
    IF p_retry THEN
        SELECT l.results INTO v_done FROM @S@.latches l WHERE l.request = p_request;
    END IF;
    RETURN v_done;
END
$$;

-- The release step: removes p_owner's whole hold on p_name (whatever its count) and announces
-- it to the waiters. 1 released, 0 not held; a name in use as another kind raises DL001.
-- A reentrant or fenced hold's release keeps no latch: the client sends its one DELETE first
-- (see the backend's statements) and calls this only when that found nothing, so a release
-- sent again (p_retry) answers from lost_holds whether the first attempt released the hold.
-- Other kinds latch their answer by request id.
CREATE OR REPLACE FUNCTION @S@.release(p_kind "char", p_name text, p_owner text,
    p_request bigint, p_retry boolean, p_forget bigint, p_sync text) RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_done smallint[];
    v_code smallint;
BEGIN
    IF p_kind IN ('e', 't') THEN
        -- A first attempt that found no live hold latched its "not held" (the client's one
        -- DELETE statement does): sent again, the release answers the same.
        IF p_retry THEN
            SELECT l.results INTO v_done FROM @S@.latches l WHERE l.request = p_request;
            IF FOUND THEN
                RETURN v_done[1];
            END IF;
        END IF;
        v_code := @S@._release_e(p_name, p_owner, v_now);
        IF v_code = 0 AND p_retry THEN
            v_code := @S@._released_before(p_name, p_owner);
        END IF;
        PERFORM set_config('synchronous_commit', CASE WHEN v_code > 0 THEN p_sync ELSE 'off' END,
                           true);
        RETURN v_code;
    END IF;
    v_done := @S@._latched(p_request, p_retry, p_forget);
    IF v_done IS NOT NULL THEN
        RETURN v_done[1];
    END IF;
    v_code := @S@._release(p_kind, p_name, p_owner, v_now);
    IF v_code < 0 THEN
        PERFORM @S@._wrong_kind(CASE v_code WHEN -1 THEN 'e' WHEN -2 THEN 'f' ELSE 'w' END);
    END IF;
    IF v_code > 0 THEN
        INSERT INTO @S@.latches (request, results, expires_at)
        VALUES (p_request, ARRAY[v_code], v_now + interval '10 minutes');
        PERFORM set_config('synchronous_commit', p_sync, true);
    ELSE
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN v_code;
END
$$;

-- Several releases in one step, each as release makes it; a name in use as another kind gets
-- its wrong-kind code and does not stop the others.
CREATE OR REPLACE FUNCTION @S@.release_many(p_kinds "char"[], p_names text[], p_owners text[],
    p_request bigint, p_retry boolean, p_forget bigint, p_sync text) RETURNS smallint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_done smallint[];
    v_codes smallint[] := '{}';
BEGIN
    v_done := @S@._latched(p_request, p_retry, p_forget);
    IF v_done IS NOT NULL THEN
        RETURN v_done;
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        v_codes := v_codes || @S@._release(p_kinds[i], p_names[i], p_owners[i], v_now);
    END LOOP;
    IF 1 = ANY (v_codes) THEN
        INSERT INTO @S@.latches (request, results, expires_at)
        VALUES (p_request, v_codes, v_now + interval '10 minutes');
        PERFORM set_config('synchronous_commit', p_sync, true);
    ELSE
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN v_codes;
END
$$;

-- The release of p_owner's reentrant hold that hands the lock to p_successor (waiting as
-- p_waiter) in the same step (one hold, p_lease_us from now): nobody is woken, the lock stays
-- held. 2 handed over, 0 not held; 1 released: another waiter is marked before p_waiter, and
-- takes the lock once free (the release is announced, as _release_e does). Latched as
-- release is.
CREATE OR REPLACE FUNCTION @S@.hand_over(p_name text, p_owner text, p_successor text,
    p_waiter text, p_lease_us bigint, p_request bigint, p_retry boolean, p_forget bigint,
    p_sync text)
RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_done smallint[];
    v_code smallint;
BEGIN
    v_done := @S@._latched(p_request, p_retry, p_forget);
    IF v_done IS NOT NULL THEN
        RETURN v_done[1];
    END IF;
    IF @S@._turn_of_other(p_name, p_waiter, v_now) IS NOT NULL THEN
        v_code := @S@._release_e(p_name, p_owner, v_now);
        IF v_code = 1 THEN
            INSERT INTO @S@.latches (request, results, expires_at)
            VALUES (p_request, ARRAY[1::smallint], v_now + interval '10 minutes');
            PERFORM set_config('synchronous_commit', p_sync, true);
            RETURN 1;
        END IF;
        IF v_code < 0 THEN
            PERFORM @S@._wrong_kind(CASE v_code WHEN -1 THEN 'e' WHEN -2 THEN 'f' ELSE 'w' END);
        END IF;
        PERFORM set_config('synchronous_commit', 'off', true);
        RETURN 0;
    END IF;
    DELETE FROM @S@.lock_waiters w WHERE w.name = p_name AND w.owner = p_waiter;
    UPDATE @S@.locks SET owner = p_successor, holds = 1,
                         expires_at = @S@._after(v_now, p_lease_us)
     WHERE name = p_name AND owner = p_owner AND family = 'e' AND expires_at > v_now;
    IF FOUND THEN
        INSERT INTO @S@.latches (request, results, expires_at)
        VALUES (p_request, ARRAY[2::smallint], v_now + interval '10 minutes');
        PERFORM set_config('synchronous_commit', p_sync, true);
        RETURN 2;
    END IF;
    v_code := @S@._not_held(p_name, 'e', v_now);
    IF v_code < 0 THEN
        PERFORM @S@._wrong_kind(CASE v_code WHEN -1 THEN 'e' WHEN -2 THEN 'f' ELSE 'w' END);
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN 0;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Renewal: every hold of the batch that its owner still has gets at least p_lease_us from now
-- (never shortened: a late renewal may meet a newer hold of the same owner on a longer lease).
-- Answers a code per hold, in order: 1 renewed, 2 another owner holds the lock now, 0 gone. A
-- hold that is gone is never brought back.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION @S@.renew(p_kinds "char"[], p_names text[], p_owners text[],
    p_lease_us bigint, p_sync text) RETURNS smallint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_exp timestamptz := @S@._after(v_now, p_lease_us);
    v_n integer := coalesce(array_length(p_names, 1), 0);
    v_fair smallint[];
    v_renewed bigint := 0;
    v_count bigint;
    v_codes smallint[];
    r @S@.locks;
    i integer;
BEGIN
    -- Fair holds one by one, in name order as every step that takes several names' rows: the
    -- waiters' time-outs move by the lease added.
    IF 'f' = ANY (p_kinds) THEN
        FOR i IN SELECT t.i::integer FROM unnest(p_names) WITH ORDINALITY AS t(name, i)
                  ORDER BY t.name COLLATE "C", t.i LOOP
            CONTINUE WHEN p_kinds[i] <> 'f';
            SELECT * INTO r FROM @S@.locks WHERE name = p_names[i] AND family = 'f' FOR UPDATE;
            IF FOUND AND r.owner = p_owners[i] AND r.expires_at > v_now THEN
                IF v_exp > r.expires_at THEN
                    UPDATE @S@.locks SET expires_at = v_exp WHERE name = p_names[i];
                    UPDATE @S@.waiters SET timeout_at = timeout_at + (v_exp - r.expires_at)
                     WHERE name = p_names[i];
                END IF;
                v_fair[i] := 1;
                v_renewed := v_renewed + 1;
            ELSIF FOUND AND r.owner IS NOT NULL AND r.expires_at > v_now THEN
                v_fair[i] := 2;
            ELSE
                v_fair[i] := 0;
            END IF;
        END LOOP;
    END IF;
    -- Every other kind in one statement per table, each run only when the batch has its kind.
    IF p_kinds && ARRAY['e', 't', 'w', 'n']::"char"[] THEN
        WITH x AS (
            UPDATE @S@.locks l SET expires_at = greatest(l.expires_at, v_exp)
              FROM unnest(p_kinds, p_names, p_owners) AS h(kind, name, owner)
             WHERE h.kind IN ('e', 't', 'w', 'n') AND l.name = h.name AND l.owner = h.owner
               AND l.expires_at > v_now AND l.family = @S@._family(h.kind)
            RETURNING 1)
        SELECT count(*) INTO v_count FROM x;
        v_renewed := v_renewed + v_count;
    END IF;
    IF 'r' = ANY (p_kinds) THEN
        -- The names' rows first (in name order), then their readers, as a read release takes
        -- them (its name's row, then its reader): updating the readers first and the row after
        -- deadlocked with a release of the same reader.
        PERFORM 1 FROM @S@.locks l
         WHERE l.name IN (SELECT h.name FROM unnest(p_kinds, p_names) AS h(kind, name)
                           WHERE h.kind = 'r')
         ORDER BY l.name FOR UPDATE;
        WITH rd AS (
            UPDATE @S@.readers d SET expires_at = greatest(d.expires_at, v_exp)
              FROM unnest(p_kinds, p_names, p_owners) AS h(kind, name, owner)
             WHERE h.kind = 'r' AND d.name = h.name AND d.owner = h.owner
               AND d.expires_at > v_now
            RETURNING d.name
        ), ru AS (
            UPDATE @S@.locks l SET read_until = greatest(l.read_until, v_exp)
             WHERE l.name IN (SELECT rd.name FROM rd) AND l.read_until < v_exp)
        SELECT count(*) INTO v_count FROM rd;
        v_renewed := v_renewed + v_count;
    END IF;
    IF 's' = ANY (p_kinds) THEN
        WITH pm AS (
            UPDATE @S@.permits p SET expires_at = greatest(p.expires_at, v_exp)
              FROM unnest(p_kinds, p_names, p_owners) AS h(kind, name, owner)
             WHERE h.kind = 's' AND p.name = h.name AND p.owner = h.owner
               AND p.expires_at > v_now
            RETURNING 1)
        SELECT count(*) INTO v_count FROM pm;
        v_renewed := v_renewed + v_count;
    END IF;
    -- Latches and lost holds whose release never came back for them (their client is gone).
    DELETE FROM @S@.latches WHERE expires_at < v_now;
    DELETE FROM @S@.lost_holds WHERE expires_at < v_now;
    PERFORM set_config('synchronous_commit', p_sync, true);
    -- As many rows renewed as holds asked for: each hold matched a row of its own.
    IF v_renewed = v_n THEN
        RETURN array_fill(1::smallint, ARRAY[v_n]);
    END IF;
    -- Else read each hold's answer: a hold still live now is one this step renewed.
    SELECT array_agg(CASE
            WHEN h.kind = 'f' THEN v_fair[h.i::integer]
            WHEN h.kind = 'r' AND EXISTS (
                SELECT 1 FROM @S@.readers d
                 WHERE d.name = h.name AND d.owner = h.owner AND d.expires_at > v_now)
                THEN 1::smallint
            WHEN h.kind = 's' AND EXISTS (
                SELECT 1 FROM @S@.permits p
                 WHERE p.name = h.name AND p.owner = h.owner AND p.expires_at > v_now)
                THEN 1::smallint
            WHEN h.kind IN ('e', 't', 'w', 'n') AND l.owner = h.owner
                 AND l.family = @S@._family(h.kind) AND l.expires_at > v_now
                THEN 1::smallint
            WHEN l.owner IS NOT NULL AND l.owner <> h.owner AND l.expires_at > v_now
                THEN 2::smallint
            ELSE 0::smallint END ORDER BY h.i)
      INTO v_codes
      FROM unnest(p_kinds, p_names, p_owners) WITH ORDINALITY AS h(kind, name, owner, i)
      LEFT JOIN @S@.locks l ON l.name = h.name;
    RETURN coalesce(v_codes, '{}');
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Status, force unlock, giving up a wait, watching.
-- ---------------------------------------------------------------------------------------------

-- (locked, locked by p_owner, the remaining lease in microseconds) of one kind of lock; for the
-- read side, whether anyone reads, whether p_owner does, and the longest reader's lease.
CREATE OR REPLACE FUNCTION @S@.status(p_kind "char", p_name text, p_owner text,
    OUT locked boolean, OUT mine boolean, OUT remaining_us bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_family "char" := @S@._family(p_kind);
    r @S@.locks;
    v_read timestamptz;
    v_mine timestamptz;
BEGIN
    locked := false;
    mine := false;
    SELECT * INTO r FROM @S@.locks WHERE name = p_name;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF r.family <> v_family THEN
        IF @S@._in_use(r, v_now) THEN
            PERFORM @S@._wrong_kind(r.family);
        END IF;
        RETURN;
    END IF;
    IF p_kind = 'r' THEN
        SELECT max(h.expires_at), coalesce(bool_or(h.owner = p_owner), false)
          INTO v_read, mine
          FROM @S@.readers h WHERE h.name = p_name AND h.expires_at > v_now;
        IF v_read IS NOT NULL THEN
            locked := true;
            remaining_us := @S@._left(v_read, v_now);
        END IF;
        RETURN;
    END IF;
    IF p_kind = 's' THEN
        -- Held by p_owner: its own permit's lease; else the soonest permit to come back.
        SELECT min(p.expires_at), max(p.expires_at) FILTER (WHERE p.owner = p_owner)
          INTO v_read, v_mine
          FROM @S@.permits p WHERE p.name = p_name AND p.expires_at > v_now;
        IF v_read IS NOT NULL THEN
            locked := true;
            mine := v_mine IS NOT NULL;
            remaining_us := @S@._left(coalesce(v_mine, v_read), v_now);
        END IF;
        RETURN;
    END IF;
    IF p_kind = 'l' THEN
        locked := coalesce(r.counter, 0) > 0;
        RETURN;
    END IF;
    IF r.owner IS NOT NULL AND r.expires_at > v_now THEN
        locked := true;
        mine := r.owner = p_owner;
        remaining_us := @S@._left(r.expires_at, v_now);
    END IF;
END
$$;

-- Removes the lock's holder (for the read side: every reader) whoever it is, and wakes its
-- waiters. Answers whether it was held.
CREATE OR REPLACE FUNCTION @S@.force_unlock(p_kind "char", p_name text, p_sync text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_family "char" := @S@._family(p_kind);
    r @S@.locks;
    v_held boolean;
    v_read timestamptz;
BEGIN
    PERFORM set_config('synchronous_commit', p_sync, true);
    SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF r.family <> v_family THEN
        IF @S@._in_use(r, v_now) THEN
            PERFORM @S@._wrong_kind(r.family);
        END IF;
        RETURN false;
    END IF;
    -- Every hold it ends is noted, live or past its lease, and never made again under its id
    -- (see _ended); a release of it sent again answers "not held".
    IF p_kind = 'r' THEN
        SELECT max(h.expires_at) INTO v_read FROM @S@.readers h
         WHERE h.name = p_name AND h.expires_at > v_now;
        v_held := v_read IS NOT NULL;
        PERFORM @S@._forced(p_name, h.owner, v_now) FROM @S@.readers h WHERE h.name = p_name;
        DELETE FROM @S@.readers WHERE name = p_name;
        IF r.owner IS NOT NULL AND r.expires_at > v_now THEN
            UPDATE @S@.locks SET read_until = '-infinity' WHERE name = p_name;
        ELSE
            DELETE FROM @S@.locks WHERE name = p_name;
        END IF;
        IF v_held THEN
            PERFORM @S@._announce(@S@._key(p_name));
        END IF;
        RETURN v_held;
    END IF;
    v_held := r.owner IS NOT NULL AND r.expires_at > v_now;
    IF r.owner IS NOT NULL THEN
        PERFORM @S@._forced(p_name, r.owner, v_now);
    END IF;
    IF p_kind = 'f' THEN
        PERFORM @S@._purge_heads(p_name, v_now);
        IF EXISTS (SELECT 1 FROM @S@.waiters w WHERE w.name = p_name) THEN
            UPDATE @S@.locks SET owner = NULL, holds = 0, expires_at = '-infinity'
             WHERE name = p_name;
            IF v_held THEN
                PERFORM @S@._wake_queue(p_name, 2);
            END IF;
        ELSE
            DELETE FROM @S@.locks WHERE name = p_name;
        END IF;
        RETURN v_held;
    END IF;
    IF p_kind = 'w' AND r.owner IS NULL THEN
        -- No writer: the readers are no write lock's to end.
        RETURN false;
    END IF;
    IF p_kind = 'w' THEN
        IF NOT v_held THEN
            -- A writer past its lease has no readers of its own: those admitted since stay,
            -- and the row lives as long as the longest of them.
            SELECT max(h.expires_at) INTO v_read FROM @S@.readers h
             WHERE h.name = p_name AND h.expires_at > v_now;
            IF v_read IS NOT NULL THEN
                UPDATE @S@.locks SET owner = NULL, holds = 0, expires_at = '-infinity',
                                     read_until = v_read
                 WHERE name = p_name;
                RETURN false;
            END IF;
        END IF;
        -- The readers next to a live writer are its own (a writer may read): they end with it.
        PERFORM @S@._forced(p_name, h.owner, v_now) FROM @S@.readers h WHERE h.name = p_name;
        DELETE FROM @S@.readers WHERE name = p_name;
    END IF;
    DELETE FROM @S@.locks WHERE name = p_name;
    IF v_held AND p_kind IN ('e', 't') THEN
        PERFORM @S@._announce_free_e(p_name, true, v_now);
    ELSIF v_held THEN
        PERFORM @S@._announce(@S@._key(p_name));
    END IF;
    RETURN v_held;
END
$$;

-- A fair waiter gives up (p_kind 'f'): it leaves the queue and everyone behind it moves up one
-- slot; if it was the head and the lock is free, the new head and the one behind it are woken.
-- A read-write lock's waiter gives up (p_kind 'r' or 'w'), or a plain lock's (p_kind 'e' or
-- 't'): its mark goes. Answers whether it was queued (marked).
CREATE OR REPLACE FUNCTION @S@.cancel_wait(p_name text, p_owner text, p_slot_us bigint,
    p_sync text, p_kind "char") RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    r @S@.locks;
    v_seq bigint;
    v_was_head boolean;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_kind IN ('e', 't', 'r', 'w') THEN
        -- A plain or read-write waiter's mark goes; unless the lock is held, the waiters it
        -- held off look again.
        IF p_kind IN ('e', 't') THEN
            DELETE FROM @S@.lock_waiters WHERE name = p_name AND owner = p_owner;
        ELSE
            DELETE FROM @S@.rw_waiters WHERE name = p_name AND side = p_kind AND owner = p_owner;
        END IF;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
        IF EXISTS (SELECT 1 FROM @S@.locks l WHERE l.name = p_name
                      AND l.family = @S@._family(p_kind)
                      AND l.owner IS NOT NULL AND l.expires_at > v_now) THEN
            RETURN true;
        END IF;
        IF p_kind IN ('e', 't') THEN
            PERFORM @S@._announce_free_e(p_name, true, v_now);
        ELSE
            PERFORM @S@._announce(@S@._key(p_name));
        END IF;
        RETURN true;
    END IF;
    SELECT * INTO r FROM @S@.locks WHERE name = p_name AND family = 'f' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT w.seq INTO v_seq FROM @S@.waiters w WHERE w.name = p_name AND w.owner = p_owner;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_was_head := NOT EXISTS (
        SELECT 1 FROM @S@.waiters w WHERE w.name = p_name AND w.seq < v_seq);
    UPDATE @S@.waiters SET timeout_at = timeout_at - p_slot_us * interval '1 microsecond'
     WHERE name = p_name AND seq > v_seq;
    DELETE FROM @S@.waiters WHERE name = p_name AND owner = p_owner;
    PERFORM @S@._drop_secrets(p_name, p_owner);
    IF NOT (r.owner IS NOT NULL AND r.expires_at > v_now) THEN
        IF EXISTS (SELECT 1 FROM @S@.waiters w WHERE w.name = p_name) THEN
            IF v_was_head THEN
                PERFORM @S@._wake_queue(p_name, 2);
            END IF;
        ELSE
            DELETE FROM @S@.locks WHERE name = p_name;
        END IF;
    END IF;
    RETURN true;
END
$$;

-- A waiter subscribed to p_name's releases: the next release is announced. Answers whether
-- the lock was not marked yet.
CREATE OR REPLACE FUNCTION @S@.watch(p_name text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    UPDATE @S@.locks SET contended = true WHERE name = p_name AND NOT contended;
    RETURN FOUND;
END
$$;

-- Deletes what expired leases left behind (rows of locks whose holders died, dead readers and
-- waiters, old latches; dead permits go back to their semaphore): nothing a live lock needs. For DBAs; dlock never needs it to be run.
CREATE OR REPLACE FUNCTION @S@.purge() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_name text;
    v_count bigint;
BEGIN
    -- The names' rows first, in name order, as every step takes a name's row before the rows
    -- that depend on it (a reader, a waiter, a mark, a lost hold): the other way round, purge
    -- and a release of a hold that ran out would each wait for the other.
    PERFORM 1 FROM @S@.locks l
     WHERE l.name IN (SELECT h.name FROM @S@.readers h WHERE h.expires_at <= v_now
                      UNION SELECT w.name FROM @S@.waiters w WHERE w.timeout_at <= v_now
                      UNION SELECT m.name FROM @S@.rw_waiters m WHERE m.until <= v_now
                      UNION SELECT m.name FROM @S@.lock_waiters m WHERE m.until <= v_now
                      UNION SELECT g.name FROM @S@.lost_holds g WHERE g.expires_at <= v_now
                      UNION SELECT p.name FROM @S@.permits p WHERE p.expires_at <= v_now)
        OR (NOT (l.owner IS NOT NULL AND l.expires_at > v_now) AND l.read_until <= v_now)
     ORDER BY l.name FOR UPDATE;
    DELETE FROM @S@.readers WHERE expires_at <= v_now;
    DELETE FROM @S@.waiters WHERE timeout_at <= v_now;
    DELETE FROM @S@.rw_waiters WHERE until <= v_now;
    DELETE FROM @S@.lock_waiters WHERE until <= v_now;
    DELETE FROM @S@.latches WHERE expires_at <= v_now;
    DELETE FROM @S@.lost_holds WHERE expires_at <= v_now;
    PERFORM @S@._purge_secrets();
    -- A dead holder's permit goes back to its semaphore.
    FOR v_name IN SELECT DISTINCT p.name FROM @S@.permits p WHERE p.expires_at <= v_now LOOP
        PERFORM 1 FROM @S@.locks l WHERE l.name = v_name FOR UPDATE;
        PERFORM @S@._reclaim_permits(v_name, v_now);
    END LOOP;
    WITH gone AS (
        DELETE FROM @S@.locks l
         WHERE NOT (l.owner IS NOT NULL AND l.expires_at > v_now)
           AND l.read_until <= v_now
           AND NOT (l.family IN ('s', 'l') AND l.counter IS NOT NULL)
           AND NOT EXISTS (SELECT 1 FROM @S@.permits p WHERE p.name = l.name)
           AND NOT EXISTS (SELECT 1 FROM @S@.waiters w WHERE w.name = l.name)
           AND NOT EXISTS (SELECT 1 FROM @S@.readers h WHERE h.name = l.name)
        RETURNING l.name, l.family, l.owner
    ), lost AS (
        -- A reentrant or fenced holder whose lease ran out lost its hold.
        INSERT INTO @S@.lost_holds (name, owner, expires_at)
        SELECT gone.name, gone.owner, v_now + interval '10 minutes' FROM gone
         WHERE gone.family = 'e' AND gone.owner IS NOT NULL
        ON CONFLICT (name, owner) DO NOTHING)
    SELECT count(*) INTO v_count FROM gone;
    RETURN v_count;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- The synchronizers: a semaphore's leased permits ('s'), a count-down latch ('l') and a leader
-- election ('n'), each a family of its own in locks (one kind per name, as for the locks).
-- Their changes are announced on the name's key to everyone listening: a permit given back or
-- added, a latch opened, a new leader or none.
-- ---------------------------------------------------------------------------------------------

-- The permits of semaphore p_name whose lease ended go back to it (its row locked by the
-- caller); answers how many.
CREATE OR REPLACE FUNCTION @S@._reclaim_permits(p_name text, p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_back bigint;
BEGIN
    DELETE FROM @S@.permits WHERE name = p_name AND expires_at <= p_now;
    GET DIAGNOSTICS v_back = ROW_COUNT;
    IF v_back > 0 THEN
        UPDATE @S@.locks SET counter = coalesce(counter, 0) + v_back WHERE name = p_name;
    END IF;
    RETURN v_back;
END
$$;

-- A permit of semaphore p_name for the hold p_owner: this hold's permit already (a request
-- sent again) -> its lease extended, nothing more taken; a permit available -> taken, with the
-- lease; else refused, with how long until the soonest permit's lease ends (none: NULL), and the
-- row marked contended so the release that gives one back announces it. Permits never set ->
-- refused.
CREATE OR REPLACE FUNCTION @S@._acquire_s(p_name text, p_owner text, p_lease_us bigint,
    p_now timestamptz,
    OUT o_acquired boolean, OUT o_remaining bigint, OUT o_token bigint, OUT o_found "char")
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz := @S@._after(p_now, p_lease_us);
    r @S@.locks;
BEGIN
    o_acquired := false;
    SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        -- Never set: setting the permits announces them.
        RETURN;
    END IF;
    IF r.family <> 's' THEN
        IF @S@._in_use(r, p_now) THEN
            o_found := r.family;
            RETURN;
        END IF;
        PERFORM @S@._convert(p_name, 's');
    END IF;
    PERFORM @S@._reclaim_permits(p_name, p_now);
    UPDATE @S@.permits SET expires_at = greatest(expires_at, v_exp)
     WHERE name = p_name AND owner = p_owner;
    IF FOUND THEN
        o_acquired := true;
        RETURN;
    END IF;
    UPDATE @S@.locks SET counter = counter - 1 WHERE name = p_name AND counter > 0;
    IF FOUND THEN
        INSERT INTO @S@.permits (name, owner, expires_at) VALUES (p_name, p_owner, v_exp);
        o_acquired := true;
        RETURN;
    END IF;
    UPDATE @S@.locks SET contended = true WHERE name = p_name AND NOT contended;
    SELECT @S@._left(min(p.expires_at), p_now) INTO o_remaining
      FROM @S@.permits p WHERE p.name = p_name;
END
$$;

-- Passing count-down latch p_name: open (no count, or zero) -> taken (nothing is held); else
-- refused without a time to wait (only the count reaching zero opens it), the row marked.
CREATE OR REPLACE FUNCTION @S@._acquire_l(p_name text, p_now timestamptz,
    OUT o_acquired boolean, OUT o_remaining bigint, OUT o_token bigint, OUT o_found "char")
LANGUAGE plpgsql AS $$
DECLARE
    r @S@.locks;
BEGIN
    o_acquired := true;
    SELECT * INTO r FROM @S@.locks WHERE name = p_name;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF r.family <> 'l' THEN
        IF @S@._in_use(r, p_now) THEN
            o_acquired := false;
            o_found := r.family;
        END IF;
        RETURN;
    END IF;
    IF coalesce(r.counter, 0) > 0 THEN
        o_acquired := false;
        IF NOT r.contended THEN
            UPDATE @S@.locks SET contended = true WHERE name = p_name;
        END IF;
    END IF;
END
$$;

-- The leadership of election p_name for the hold p_owner, candidate p_value: nobody leads (or
-- the leader's lease ran out) -> this hold leads, with a new fencing token (strictly above every
-- earlier one), announced; this hold leads already -> one hold more, the lease extended (never
-- shortened), the same token; another leads -> its remaining lease.
CREATE OR REPLACE FUNCTION @S@._acquire_n(p_name text, p_owner text, p_value text,
    p_lease_us bigint, p_now timestamptz,
    OUT o_acquired boolean, OUT o_remaining bigint, OUT o_token bigint, OUT o_found "char")
LANGUAGE plpgsql AS $$
DECLARE
    v_exp timestamptz := @S@._after(p_now, p_lease_us);
    r @S@.locks;
BEGIN
    o_acquired := false;
    FOR attempt IN 1..3 LOOP
        INSERT INTO @S@.locks (name, family, owner, holds, expires_at, value)
        VALUES (p_name, 'n', p_owner, 1, v_exp, p_value)
        ON CONFLICT (name) DO NOTHING;
        IF NOT FOUND THEN
            SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
            CONTINUE WHEN NOT FOUND;  -- resigned meanwhile
            IF r.family <> 'n' THEN
                IF @S@._in_use(r, p_now) THEN
                    o_found := r.family;
                    RETURN;
                END IF;
                PERFORM @S@._convert(p_name, 'n');
                r.owner := NULL;
            END IF;
            IF r.owner = p_owner AND r.expires_at > p_now THEN
                UPDATE @S@.locks SET holds = holds + 1, expires_at = greatest(expires_at, v_exp)
                 WHERE name = p_name;
                o_acquired := true;
                SELECT f.token INTO o_token FROM @S@.fences f WHERE f.name = p_name;
                o_token := coalesce(o_token, 0);
                RETURN;
            END IF;
            IF r.owner IS NOT NULL AND r.expires_at > p_now THEN
                IF NOT r.contended THEN
                    UPDATE @S@.locks SET contended = true WHERE name = p_name;
                END IF;
                o_remaining := @S@._left(r.expires_at, p_now);
                RETURN;
            END IF;
            UPDATE @S@.locks SET owner = p_owner, holds = 1, expires_at = v_exp, value = p_value
             WHERE name = p_name;
        END IF;
        o_acquired := true;
        o_token := @S@._next_token(p_name, p_now);
        PERFORM @S@._announce(@S@._key(p_name));
        RETURN;
    END LOOP;
    -- Led and resigned three times while this step ran: the caller tries again.
    o_remaining := 0;
END
$$;

-- The leadership step (an election's acquire): as acquire, with the candidate id kept for
-- everyone to read.
CREATE OR REPLACE FUNCTION @S@.acquire_leader(p_name text, p_owner text, p_value text,
    p_lease_us bigint, p_sync text,
    OUT acquired boolean, OUT remaining_us bigint, OUT fencing_token bigint, OUT gone boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_found "char";
BEGIN
    gone := @S@._ended(p_name, p_owner, clock_timestamp());
    IF gone THEN
        acquired := false;
        PERFORM set_config('synchronous_commit', 'off', true);
        RETURN;
    END IF;
    SELECT * INTO acquired, remaining_us, fencing_token, v_found
      FROM @S@._acquire_n(p_name, p_owner, p_value, p_lease_us, clock_timestamp());
    IF v_found IS NOT NULL THEN
        PERFORM @S@._wrong_kind(v_found);
    END IF;
    IF acquired THEN
        PERFORM @S@._unless_ended(p_name, p_owner, 0);
    END IF;
    PERFORM set_config('synchronous_commit', CASE WHEN acquired THEN p_sync ELSE 'off' END, true);
END
$$;

-- A semaphore's permit given back: the permit of the hold p_owner goes (1), and the semaphore
-- has one more; a permit that is not there (its lease ran out, given back already) -> 0.
CREATE OR REPLACE FUNCTION @S@._release_s(p_name text, p_owner text, p_now timestamptz)
RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    r @S@.locks;
BEGIN
    SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
    IF NOT FOUND OR r.family <> 's' THEN
        RETURN 0;
    END IF;
    PERFORM @S@._reclaim_permits(p_name, p_now);
    DELETE FROM @S@.permits WHERE name = p_name AND owner = p_owner;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    UPDATE @S@.locks SET counter = coalesce(counter, 0) + 1, contended = false
     WHERE name = p_name;
    IF r.contended THEN
        PERFORM @S@._announce(@S@._key(p_name));
    END IF;
    RETURN 1;
END
$$;

-- A leader resigns: the row goes, and everyone watching the election is told.
CREATE OR REPLACE FUNCTION @S@._release_n(p_name text, p_owner text, p_now timestamptz)
RETURNS smallint
LANGUAGE plpgsql AS $$
DECLARE
    v_live boolean;
BEGIN
    DELETE FROM @S@.locks
     WHERE name = p_name AND owner = p_owner AND family = 'n'
    RETURNING expires_at > p_now INTO v_live;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    PERFORM @S@._announce(@S@._key(p_name));
    RETURN CASE WHEN v_live THEN 1 ELSE 0 END;
END
$$;

-- A step on a synchronizer's number, p_op: 'P' sets semaphore p_name's permits to p_value if
-- they were never set (1 if it did, else 0); 'A' adds p_value permits (setting them if never
-- set) and answers those available after; 'a' answers the permits available (leases that ran
-- out given back); 'C' sets latch p_name's count to p_value if it has none (1 if it did, else
-- 0); 'D' counts it down by one (at zero it opens) and answers the count after; 'c' answers
-- its count (0: open). Changes are announced; a name in use as another kind raises DL001, a
-- count that would pass 2^63 - 1 DL002.
CREATE OR REPLACE FUNCTION @S@._counter(p_op "char", p_name text, p_value bigint,
    p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := p_now;
    v_family "char" := CASE WHEN p_op IN ('P', 'A', 'a') THEN 's' ELSE 'l' END;
    v_reads boolean := p_op IN ('a', 'c');
    r @S@.locks;
BEGIN
    FOR attempt IN 1..3 LOOP
        SELECT * INTO r FROM @S@.locks WHERE name = p_name FOR UPDATE;
        IF NOT FOUND THEN
            IF v_reads OR p_op = 'D' THEN
                RETURN 0;
            END IF;
            IF p_op = 'C' AND p_value = 0 THEN
                -- A latch counting from zero is open: nothing to keep.
                RETURN 1;
            END IF;
            INSERT INTO @S@.locks (name, family, counter) VALUES (p_name, v_family, p_value)
            ON CONFLICT (name) DO NOTHING;
            CONTINUE WHEN NOT FOUND;  -- made meanwhile: read it
            PERFORM @S@._announce(@S@._key(p_name));
            RETURN CASE WHEN p_op = 'A' THEN p_value ELSE 1 END;
        END IF;
        IF r.family <> v_family THEN
            IF @S@._in_use(r, v_now) THEN
                PERFORM @S@._wrong_kind(r.family);
            END IF;
            IF v_reads OR p_op = 'D' THEN
                RETURN 0;
            END IF;
            PERFORM @S@._convert(p_name, v_family);
            r.counter := NULL;
        END IF;
        IF v_family = 's' THEN
            IF @S@._reclaim_permits(p_name, v_now) > 0 THEN
                SELECT * INTO r FROM @S@.locks WHERE name = p_name;
            END IF;
        END IF;
        CASE p_op
            WHEN 'P' THEN
                IF r.counter IS NOT NULL THEN
                    RETURN 0;
                END IF;
                UPDATE @S@.locks SET counter = p_value WHERE name = p_name;
                PERFORM @S@._announce(@S@._key(p_name));
                RETURN 1;
            WHEN 'A' THEN
                IF p_value > 9223372036854775807 - coalesce(r.counter, 0) THEN
                    RAISE EXCEPTION USING ERRCODE = 'DL002',
                        MESSAGE = 'the permits would exceed what a store counts (2^63 - 1)';
                END IF;
                UPDATE @S@.locks SET counter = coalesce(counter, 0) + p_value WHERE name = p_name;
                PERFORM @S@._announce(@S@._key(p_name));
                RETURN coalesce(r.counter, 0) + p_value;
            WHEN 'a' THEN
                RETURN coalesce(r.counter, 0);
            WHEN 'C' THEN
                IF coalesce(r.counter, 0) > 0 THEN
                    RETURN 0;
                END IF;
                IF p_value = 0 THEN
                    DELETE FROM @S@.locks WHERE name = p_name;
                ELSE
                    UPDATE @S@.locks SET counter = p_value WHERE name = p_name;
                    PERFORM @S@._announce(@S@._key(p_name));
                END IF;
                RETURN 1;
            WHEN 'D' THEN
                IF coalesce(r.counter, 0) = 0 THEN
                    RETURN 0;
                END IF;
                IF r.counter > 1 THEN
                    UPDATE @S@.locks SET counter = counter - 1 WHERE name = p_name;
                    RETURN r.counter - 1;
                END IF;
                DELETE FROM @S@.locks WHERE name = p_name;
                PERFORM @S@._announce(@S@._key(p_name));
                RETURN 0;
            ELSE
                RETURN coalesce(r.counter, 0);
        END CASE;
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = '40001',
        MESSAGE = 'the name was made and dropped three times during one step';
END
$$;

-- The counter step of op p_op (see _counter). The set-once steps ('P', 'C') are latched by
-- their request id p_request: one sent again (p_retry) after its reply was lost answers as its
-- first attempt did, instead of finding what that attempt set (or, for a latch that opened
-- meanwhile, setting it again). p_forget: the latch of this connection's previous latched step,
-- whose answer arrived.
CREATE OR REPLACE FUNCTION @S@.counter(p_op "char", p_name text, p_value bigint,
    p_request bigint, p_retry boolean, p_forget bigint, p_sync text)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_once boolean := p_op IN ('P', 'C');
    v_done smallint[];
    v_answer bigint;
BEGIN
    PERFORM set_config('synchronous_commit',
                       CASE WHEN p_op IN ('a', 'c') THEN 'off' ELSE p_sync END, true);
    IF v_once THEN
        v_done := @S@._latched(p_request, p_retry, p_forget);
        IF v_done IS NOT NULL THEN
            RETURN v_done[1];
        END IF;
    ELSIF p_forget IS NOT NULL THEN
        DELETE FROM @S@.latches WHERE request = p_forget;
    END IF;
    v_answer := @S@._counter(p_op, p_name, p_value, v_now);
    IF v_once THEN
        INSERT INTO @S@.latches (request, results, expires_at)
        VALUES (p_request, ARRAY[v_answer::smallint], v_now + interval '10 minutes')
        ON CONFLICT (request) DO NOTHING;
    END IF;
    RETURN v_answer;
END
$$;

-- The leader of election p_name: its candidate id, its fencing token and its remaining lease;
-- no row when nobody leads.
CREATE OR REPLACE FUNCTION @S@.leader(p_name text,
    OUT candidate text, OUT token bigint, OUT remaining_us bigint)
RETURNS SETOF record
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    r @S@.locks;
BEGIN
    SELECT * INTO r FROM @S@.locks WHERE name = p_name;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF r.family <> 'n' THEN
        IF @S@._in_use(r, v_now) THEN
            PERFORM @S@._wrong_kind(r.family);
        END IF;
        RETURN;
    END IF;
    IF r.owner IS NOT NULL AND r.expires_at > v_now THEN
        candidate := coalesce(r.value, '');
        SELECT f.token INTO token FROM @S@.fences f WHERE f.name = p_name;
        token := coalesce(token, 0);
        remaining_us := @S@._left(r.expires_at, v_now);
        RETURN NEXT;
    END IF;
END
$$;

INSERT INTO @S@.meta (key, value) VALUES ('version', '@VERSION@')
ON CONFLICT (key) DO UPDATE SET value = excluded.value;
-- Whether the lease tables are logged (durable) or unlogged (Durability::Ephemeral), set when
-- the schema is created; a schema created before this key is logged.
INSERT INTO @S@.meta (key, value) VALUES ('tables', '@TABLES@')
ON CONFLICT (key) DO NOTHING;
