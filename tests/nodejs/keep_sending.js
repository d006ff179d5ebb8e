// The official RocketMQ 5 Node.js client through one broker's gRPC endpoint of a replicated
// group (the route names every broker of the group): a Producer sends k-0, k-1, ... one at a
// time, each again until acknowledged, printing {"acked": body, "id": messageId} per
// acknowledgement, until the file STOP exists; then a SimpleConsumer receives until it has
// every acknowledged body (60 s at most) and prints {"received": [bodies], "errors": n,
// "duplicates": [bodies delivered for the first time more than once: stored twice]}.
// Run by tests/cluster/test_grpc_nodejs_client.py (argv: endpoint topic group STOP).
'use strict';

const fs = require('fs');
const { Producer } = require('rocketmq-client-nodejs');
const { readBack } = require('./read_back');

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function main() {
  const [ endpoint, topic, group, stop ] = process.argv.slice(2);
  const producer = new Producer({ endpoints: endpoint, namespace: '', topic, requestTimeout: 3000 });
  await producer.startup();
  const acked = new Set();
  let errors = 0;
  try {
    for (let i = 0; !fs.existsSync(stop);) {
      try {
        const receipt = await producer.send({ topic, body: Buffer.from(`k-${i}`) });
        console.log(JSON.stringify({ acked: `k-${i}`, id: receipt.messageId }));
        acked.add(`k-${i}`);
        i++;
      } catch (err) { // the application retries what was not acknowledged
        errors++;
        console.error(`send k-${i} failed: ${err && err.message}`);
        await sleep(200);
      }
    }
  } finally {
    await producer.shutdown();
  }

  const { received, duplicates } = await readBack(endpoint, topic, group, acked);
  console.log(JSON.stringify({ received, errors, duplicates }));
}

main().then(() => process.exit(0), err => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
