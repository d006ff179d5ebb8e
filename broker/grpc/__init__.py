"""The gRPC messaging protocol of the official RocketMQ 5 clients (apache.rocketmq.v2), served by
the broker next to its remoting port: translation to and from the broker's own requests
(:mod:`broker.grpc.translate`) and the grpcio asyncio service (:mod:`broker.grpc.service`)."""
