-- dlock's fence, installed in the database that holds the data a lock protects (not the lock's
-- own schema, which may live elsewhere). A writer calls dlock_fence(resource, token) inside the
-- transaction that writes: a token older than one that already wrote is refused, and the
-- transaction with it; the same token writes again; two writers checking at once take turns on
-- the fence row, held until their transactions end.

-- The newest fencing token that wrote each resource.
CREATE TABLE IF NOT EXISTS @S@.dlock_fences (
    resource   text COLLATE "C" PRIMARY KEY,
    token      bigint NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Admits a write of `p_resource` by the holder of `p_token`: answers the token, or raises
-- SQLSTATE DL101 (the message names the resource, the token and the newest one, which DETAIL
-- carries alone). The row stays locked by the caller's transaction.
CREATE OR REPLACE FUNCTION @S@.dlock_fence(p_resource text, p_token bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    newest bigint;
BEGIN
    IF p_resource IS NULL OR p_token IS NULL OR p_token < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'dlock_fence needs a resource and a fencing token of 0 or more';
    END IF;
    -- ON CONFLICT locks the row whether it updates it or not: a second writer waits here for
    -- the first one's transaction, then sees its token.
    INSERT INTO @S@.dlock_fences AS f (resource, token)
    VALUES (p_resource, p_token)
    ON CONFLICT (resource) DO UPDATE
        SET token = excluded.token, written_at = clock_timestamp()
        WHERE f.token <= excluded.token
    RETURNING f.token INTO newest;
    IF newest IS NULL THEN
        SELECT f.token INTO newest FROM @S@.dlock_fences AS f WHERE f.resource = p_resource;
        RAISE EXCEPTION USING ERRCODE = 'DL101',
            MESSAGE = format('resource %L: fencing token %s is stale, token %s already wrote',
                             p_resource, p_token, newest),
            DETAIL = newest::text;
    END IF;
    RETURN newest;
END
$$;
