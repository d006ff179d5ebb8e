// The official RocketMQ 5 Node.js client's PushConsumer in a FIFO consumer group: a Producer
// sends 12 messages in message groups g0..g2 (body "g<k>:<i>"); the consumer's listener fails
// the message "g1:4" once (ConsumeResult.FAILURE) and consumes every other delivery. Prints
// {"consumed": [bodies in the order consumed], "failed": [bodies failed]} once 12 were consumed
// (40 s at most). Run by tests/cluster/test_grpc_nodejs_client.py (argv: endpoint topic group).
'use strict';

const { Producer, PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function main() {
  const [ endpoint, topic, group ] = process.argv.slice(2);
  const producer = new Producer({ endpoints: endpoint, namespace: '', topic });
  await producer.startup();
  try {
    for (let i = 0; i < 12; i++) {
      await producer.send({ topic, messageGroup: `g${i % 3}`, body: Buffer.from(`g${i % 3}:${i}`) });
    }
  } finally {
    await producer.shutdown();
  }
  const consumed = [];
  const failed = [];
  const consumer = new PushConsumer({
    endpoints: endpoint, namespace: '', consumerGroup: group,
    subscriptions: new Map([ [ topic, '*' ] ]),
    messageListener: {
      async consume(m) {
        const body = m.body.toString();
        if (body === 'g1:4' && failed.length === 0) {
          failed.push(body);
          return ConsumeResult.FAILURE;
        }
        consumed.push(body);
        return ConsumeResult.SUCCESS;
      },
    },
  });
  await consumer.startup();
  try {
    const deadline = Date.now() + 40000;
    while (consumed.length < 12 && Date.now() < deadline) await sleep(100);
  } finally {
    await consumer.shutdown();
  }
  console.log(JSON.stringify({ consumed, failed }));
}

main().then(() => process.exit(0), err => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
