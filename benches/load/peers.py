"""Test peers of the sinks' load run (benches/load/sinks.sh).

    peers.py setup KIND       creates what the relay's sink of KIND writes to
                              (RabbitMQ queues, a JetStream stream, SQS queues)
    peers.py count KIND       prints how many messages the peer holds
    peers.py teardown KIND    deletes what setup created
    peers.py pubsub-peer PORT a Pub/Sub REST peer: answers every
                              POST .../topics/T:publish with messageIds and
                              counts the messages (GET /count)

Every name starts with `ankusa-load` / `ANKUSA_LOAD` so a run never touches
anything else on the brokers. Clients: pika (RabbitMQ), nats-py, boto3
(installed with moto), all from PyPI into the moto venv by sinks.sh.
"""

import asyncio
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

QUEUES = ["ankusa-load-load", "ankusa-load-lane"]
SQS = "http://127.0.0.1:5000"


def rabbit(op):
    import pika

    conn = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:5672/%2f"))
    ch = conn.channel()
    total = 0
    for q in QUEUES:
        if op == "setup":
            ch.queue_declare(q, durable=True)
            ch.queue_purge(q)
        elif op == "count":
            total += ch.queue_declare(q, durable=True, passive=True).method.message_count
        else:
            ch.queue_delete(q)
    conn.close()
    return total


async def nats(op):
    import nats as natspy

    nc = await natspy.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    total = 0
    if op == "setup":
        try:
            await js.delete_stream("ANKUSA_LOAD")
        except Exception:
            pass
        await js.add_stream(name="ANKUSA_LOAD", subjects=["ankusa.load.>"])
    elif op == "count":
        total = (await js.stream_info("ANKUSA_LOAD")).state.messages
    else:
        await js.delete_stream("ANKUSA_LOAD")
    await nc.close()
    return total


def sqs(op):
    import boto3

    c = boto3.client("sqs", endpoint_url=SQS, region_name="us-east-1",
                     aws_access_key_id="test", aws_secret_access_key="test")
    names = {"ankusa-load-load": {}, "ankusa-load-lane.fifo": {"FifoQueue": "true"}}
    total = 0
    for name, attrs in names.items():
        if op == "setup":
            url = c.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
            c.purge_queue(QueueUrl=url)
        else:
            url = c.get_queue_url(QueueName=name)["QueueUrl"]
            if op == "count":
                a = c.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
                total += int(a["Attributes"]["ApproximateNumberOfMessages"])
            else:
                c.delete_queue(QueueUrl=url)
    return total


def pubsub_peer(port):
    lock = threading.Lock()
    count = [0]

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle
        # holds the body until the client's delayed ACK (~40 ms a request).
        disable_nagle_algorithm = True

        def log_message(self, *a):
            pass

        def reply(self, obj):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            n = int(self.headers.get("content-length", "0"))
            msgs = json.loads(self.rfile.read(n))["messages"]
            with lock:
                first = count[0]
                count[0] += len(msgs)
            self.reply({"messageIds": [str(first + i) for i in range(len(msgs))]})

        def do_GET(self):
            with lock:
                self.reply({"count": count[0]})

    ThreadingHTTPServer(("127.0.0.1", int(port)), H).serve_forever()


def main():
    op, kind = sys.argv[1], sys.argv[2]
    if op == "pubsub-peer":
        pubsub_peer(kind)
        return
    if kind == "rabbitmq":
        n = rabbit(op)
    elif kind == "nats":
        n = asyncio.run(nats(op))
    elif kind == "sqs":
        n = sqs(op)
    else:
        raise SystemExit(f"peers.py: no peer setup for {kind}")
    if op == "count":
        print(n)


if __name__ == "__main__":
    main()
