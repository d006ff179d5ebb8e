// What keep_sending.js and keep_committing.js do once they stop sending: a SimpleConsumer of
// GROUP receives TOPIC through ENDPOINT until it has every body in EXPECTED (60 s at most),
// acking each, and answers {received: [bodies], duplicates: [bodies delivered for the first
// time more than once: stored twice]}.
'use strict';

const { SimpleConsumer } = require('rocketmq-client-nodejs');

async function readBack(endpoint, topic, group, expected) {
  const consumer = new SimpleConsumer({
    endpoints: endpoint, namespace: '', consumerGroup: group,
    subscriptions: new Map([ [ topic, '*' ] ]), awaitDuration: 2000,
  });
  await consumer.startup();
  const received = new Set();
  const firsts = new Map(); // body -> deliveries with deliveryAttempt 1 (copies stored)
  try {
    const deadline = Date.now() + 60000;
    while ([ ...expected ].some(b => !received.has(b)) && Date.now() < deadline) {
      for (const m of await consumer.receive(32, 30000)) {
        const body = m.body.toString();
        received.add(body);
        if (m.deliveryAttempt === 1) firsts.set(body, (firsts.get(body) || 0) + 1);
        await consumer.ack(m);
      }
    }
  } finally {
    await consumer.shutdown();
  }
  const duplicates = [ ...firsts ].filter(([ , n ]) => n > 1).map(([ b ]) => b);
  return { received: [ ...received ], duplicates };
}

module.exports = { readBack };
