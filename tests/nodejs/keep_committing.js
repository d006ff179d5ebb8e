// The official RocketMQ 5 Node.js client's transactional Producer through one broker's gRPC
// endpoint: it sends t-0, t-1, ... one at a time, each as a transaction of its own (the half
// message, then commit), printing {"acked": body} per commit answered OK, until the file STOP
// exists. The client resends neither a transactional send nor an EndTransaction: a send that
// fails is given up (its checker rolls it back if it was stored) and the next body is sent; a
// commit that fails is left to the broker's check-back (its checker commits it). Then a
// SimpleConsumer receives until it has every body it meant to commit (60 s at most) and prints
// {"received": [bodies], "sendErrors": [..], "commitErrors": [..], "checked": n,
//  "duplicates": [bodies delivered for the first time more than once]}.
// Run by tests/cluster/test_grpc_nodejs_client.py (argv: endpoint topic group STOP).
'use strict';

const fs = require('fs');
const { Producer } = require('rocketmq-client-nodejs');
const { readBack } = require('./read_back');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function main() {
  const [ endpoint, topic, group, stop ] = process.argv.slice(2);
  const committing = new Set(); // bodies the application decided to commit
  let checked = 0;
  const checker = {
    async check(m) {
      checked++;
      const body = m.body.toString();
      return committing.has(body) ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
    },
  };
  const producer = new Producer({
    endpoints: endpoint, namespace: '', topic, requestTimeout: 3000, checker,
  });
  await producer.startup();
  const sendErrors = [];
  const commitErrors = [];
  try {
    for (let i = 0; !fs.existsSync(stop); i++) {
      const body = `t-${i}`;
      const transaction = producer.beginTransaction();
      try {
        await producer.send({ topic, body: Buffer.from(body) }, transaction);
      } catch (err) {
        sendErrors.push(`${body}: ${err && err.message}`);
        console.error(`send ${body} failed: ${err && err.message}`);
        await sleep(200);
        continue;
      }
      committing.add(body);
      try {
        await transaction.commit();
        console.log(JSON.stringify({ acked: body }));
      } catch (err) {
        commitErrors.push(`${body}: ${err && err.message}`);
        console.error(`commit ${body} failed: ${err && err.message}`);
        await sleep(200);
      }
    }

    const { received, duplicates } = await readBack(endpoint, topic, group, committing);
    console.log(JSON.stringify({ received, sendErrors, commitErrors, checked, duplicates }));
  } finally {
    await producer.shutdown(); // after the reads: it answers check-backs until then
  }
}

main().then(() => process.exit(0), err => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
