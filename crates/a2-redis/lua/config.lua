-- config: records the layout of a key prefix on first use and returns
-- what is recorded, so a store opened with another partition count fails
-- before it writes anything.
-- KEYS[1]: config -- the prefix's config hash
-- ARGV[1]: layout -- the layout version this client writes
-- ARGV[2]: partitions -- the partition count this client wants
-- Returns: {layout, partitions} as stored.
redis.call('HSETNX', KEYS[1], 'layout', ARGV[1])
redis.call('HSETNX', KEYS[1], 'partitions', ARGV[2])
return redis.call('HMGET', KEYS[1], 'layout', 'partitions')
