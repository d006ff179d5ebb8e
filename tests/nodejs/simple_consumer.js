// The official RocketMQ 5 Node.js client against one of our brokers' gRPC endpoint: a Producer
// sends, a SimpleConsumer with a tag filter receives and acks; prints one JSON line of what it
// saw. Run by tests/cluster/test_grpc_nodejs_client.py (argv: endpoint topic group).
'use strict';

const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

async function main() {
  const [ endpoint, topic, group ] = process.argv.slice(2);
  const producer = new Producer({ endpoints: endpoint, namespace: '', topic });
  await producer.startup();
  const sent = [];
  try {
    for (let i = 0; i < 4; i++) {
      const receipt = await producer.send({
        topic,
        tag: i % 2 === 0 ? 'NodeA' : 'NodeB',
        keys: [ `node-key-${i}` ],
        properties: new Map([ [ 'from', 'nodejs' ], [ 'n', String(i) ] ]),
        body: Buffer.from(`node-${i}`),
      });
      sent.push({ id: receipt.messageId, offset: Number(receipt.offset) });
    }
  } finally {
    await producer.shutdown();
  }

  const consumer = new SimpleConsumer({
    endpoints: endpoint,
    namespace: '',
    consumerGroup: group,
    subscriptions: new Map([ [ topic, 'NodeA' ] ]),
    awaitDuration: 2000,
  });
  await consumer.startup(); // waits for the Telemetry settings answer
  const received = [];
  let changed = null;
  try {
    const deadline = Date.now() + 40000;
    while (received.length < 2 && Date.now() < deadline) {
      for (const m of await consumer.receive(16, 20000)) {
        received.push({
          id: m.messageId, topic: m.topic, tag: m.tag, keys: m.keys, body: m.body.toString(),
          properties: Object.fromEntries(m.properties), attempt: m.deliveryAttempt,
          corrupted: Boolean(m.corrupted), bornHost: m.bornHost,
        });
        if (changed === null) {
          const before = m.receiptHandle;
          await consumer.changeInvisibleDuration(m, 20000);
          changed = m.receiptHandle !== before;
        }
        await consumer.ack(m);
      }
    }
  } finally {
    await consumer.shutdown();
  }
  console.log(JSON.stringify({ sent, received, changed }));
}

main().then(() => process.exit(0), err => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
