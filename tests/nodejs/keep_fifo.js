// The official RocketMQ 5 Node.js client through one broker's gRPC endpoint of a replicated
// group: a PushConsumer of a FIFO consumer group consumes while a Producer sends FIFO messages
// "g<k>:<i>" in message groups g0..g2, one at a time, each again until acknowledged, printing
// {"acked": body} per acknowledgement, until the file STOP exists; then the consumer runs until
// it consumed every acknowledged body (25 s at most) and prints {"consumed": [bodies in the
// order consumed], "errors": n}. Run by tests/cluster/test_grpc_nodejs_client.py (argv:
// endpoint topic group STOP).
'use strict';

const fs = require('fs');
const { Producer, PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function main() {
  const [ endpoint, topic, group, stop ] = process.argv.slice(2);
  const consumed = [];
  const consumer = new PushConsumer({
    endpoints: endpoint, namespace: '', consumerGroup: group,
    subscriptions: new Map([ [ topic, '*' ] ]),
    messageListener: {
      async consume(m) {
        consumed.push(m.body.toString());
        return ConsumeResult.SUCCESS;
      },
    },
  });
  await consumer.startup();
  const producer = new Producer({ endpoints: endpoint, namespace: '', topic, requestTimeout: 3000 });
  await producer.startup();
  const acked = new Set();
  let errors = 0;
  try {
    for (let i = 0; !fs.existsSync(stop);) {
      const body = `g${i % 3}:${i}`;
      try {
        await producer.send({ topic, messageGroup: `g${i % 3}`, body: Buffer.from(body) });
        console.log(JSON.stringify({ acked: body }));
        acked.add(body);
        i++;
      } catch (err) { // the application resends what was not acknowledged, in order
        errors++;
        console.error(`send ${body} failed: ${err && err.message}`);
        await sleep(200);
      }
    }
  } finally {
    await producer.shutdown();
  }
  try {
    const deadline = Date.now() + 25000; // within the 30 s the test waits after STOP
    while ([ ...acked ].some(b => !consumed.includes(b)) && Date.now() < deadline) await sleep(100);
  } finally {
    await consumer.shutdown();
  }
  console.log(JSON.stringify({ consumed, errors }));
}

main().then(() => process.exit(0), err => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
