//! The test gateway is faithful to the protocol: the official
//! `@upstash/redis` client (installed from npm into a cache folder) runs
//! against it, with and without base64 replies: strings with newlines and
//! non-ASCII text, `eval`/`evalsha` (and `NOSCRIPT`), `xrange`, pipeline,
//! multi-exec and subscribe. Without `node` this fails when `CI` is set.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use a2_redis::testing::gateway::{Gateway, GatewayOptions};
use a2_redis::testing::{self, node};

const SCRIPT: &str = r#"
const assert = require('node:assert');
const { Redis } = require('@upstash/redis');

const url = process.env.GATEWAY_URL;
const token = process.env.GATEWAY_TOKEN;
const prefix = process.env.PREFIX;
const text = 'line one\nline two: é, 日本, 🎉, "quoted", back\\slash';

async function check(redis, label) {
  const k = (name) => `${prefix}:${label}:${name}`;

  assert.strictEqual(await redis.set(k('s'), text), 'OK');
  assert.strictEqual(await redis.get(k('s')), text, 'get returns the exact text');
  // Valid base64 as it stands: read wrongly unless the encoding is right.
  await redis.set(k('b'), 'abcd');
  assert.strictEqual(await redis.get(k('b')), 'abcd');

  const script = 'return {KEYS[1], ARGV[1], 42}';
  assert.deepStrictEqual(await redis.eval(script, [k('key')], [text]), [k('key'), text, 42]);
  const sha = await redis.scriptLoad(script);
  assert.match(sha, /^[0-9a-f]{40}$/);
  assert.deepStrictEqual(await redis.evalsha(sha, [k('key')], ['é']), [k('key'), 'é', 42]);
  await assert.rejects(redis.evalsha('0'.repeat(40), [], []), /NOSCRIPT/);

  await redis.xadd(k('x'), '1-0', { f: text });
  await redis.xadd(k('x'), '2-0', { f: 'é' });
  assert.deepStrictEqual(await redis.xrange(k('x'), '-', '+'), {
    '1-0': { f: text },
    '2-0': { f: 'é' },
  });
  assert.deepStrictEqual(await redis.xrange(k('x'), '(1-0', '+'), { '2-0': { f: 'é' } });

  const pipe = redis.pipeline();
  pipe.set(k('a'), 'é\n');
  pipe.incr(k('n'));
  pipe.get(k('a'));
  pipe.hset(k('h'), { field: text });
  pipe.hget(k('h'), 'field');
  assert.deepStrictEqual(await pipe.exec(), ['OK', 1, 'é\n', 1, text]);

  const tx = redis.multi();
  tx.incr(k('n'));
  tx.get(k('s'));
  tx.del(k('a'));
  assert.deepStrictEqual(await tx.exec(), [2, text, 1]);

  const channel = k('channel');
  const sub = redis.subscribe([channel]);
  const subscribed = new Promise((resolve) => sub.on('subscribe', resolve));
  const heard = new Promise((resolve) => sub.on('message', resolve));
  assert.strictEqual(await subscribed, 1);
  const payload = { text: 'wake é\nup', n: 3 };
  assert.strictEqual(await redis.publish(channel, JSON.stringify(payload)), 1);
  assert.deepStrictEqual(await heard, { channel, message: payload });
  await sub.unsubscribe();
}

(async () => {
  await check(new Redis({ url, token, retry: false }), 'base64');
  await check(new Redis({ url, token, retry: false, responseEncoding: false }), 'plain');
  console.log('upstash client: all checks passed');
  process.exit(0);
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
"#;

#[test]
fn rest_gateway_passes_the_official_upstash_client() {
    if !node::node_available("rest_gateway_passes_the_official_upstash_client") {
        return;
    }
    let modules = node::npm_install(&[node::UPSTASH_CLIENT]);
    let redis = testing::shared();
    let gateway = Gateway::start(&redis.url(), GatewayOptions::default());
    let dir = tempfile::tempdir().expect("a temporary folder");
    let script = dir.path().join("check.cjs");
    std::fs::write(&script, SCRIPT).expect("write the script");
    let mut child = Command::new("node")
        .arg(&script)
        .env("NODE_PATH", modules.join("node_modules"))
        .env("GATEWAY_URL", gateway.base_url())
        .env("GATEWAY_TOKEN", gateway.token())
        .env("PREFIX", testing::unique_prefix("upstash-client"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for node") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the @upstash/redis checks did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut err = String::new();
    let _ = child.stdout.take().map(|mut s| s.read_to_string(&mut out));
    let _ = child.stderr.take().map(|mut s| s.read_to_string(&mut err));
    assert!(
        status.success() && out.contains("all checks passed"),
        "the official client disagrees with the gateway:\n{out}\n{err}"
    );
}
