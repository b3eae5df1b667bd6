import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The broker tests' client (tests/broker): run by scripts/kafka.sh with Kafka's jars.
 *
 * <pre>
 * BrokerTool ready --bootstrap B [--timeout-ms N]        exit 0 once the broker answers
 * BrokerTool create-topic --bootstrap B --topic T [--partitions N] [--config k=v]...
 * BrokerTool produce --bootstrap B --topic T --count N [options]    prints a JSON summary
 *   --compression none|gzip|snappy|lz4|zstd   --batch-size BYTES   --linger-ms MS
 *   --value-bytes N (each value N bytes)      --headers N (per record, one with a null value)
 *   --null-key-every K / --null-value-every K (every K-th record)  --key-space K (keys cycle)
 *   --partition P (all to one partition; default: record i to partition i mod partitions)
 *   --idempotent   --seed S   --tag TEXT (in keys and values, to tell runs apart)
 *   --transactional-id ID --producers N --txn-records N --abort-every K
 *       N transactional producers (ids ID-0..), each transaction of N records spread over the
 *       partitions; the producers' transactions are open at the same time, so their batches
 *       interleave in each partition; every K-th transaction (counted over all producers) aborts
 * BrokerTool serve   commands from standard input, one a line (arguments separated by tabs)
 * BrokerTool consume --bootstrap B --topic T [--isolation read_committed|read_uncommitted] [--group G]
 *   every record of every partition from the beginning to the end offset (the last stable offset
 *   under read_committed), one JSON line each: topic, partition, offset, key, value (base64 or
 *   null), headers [[key, base64 or null]], timestamp, timestampType (0 CreateTime, 1 LogAppend);
 *   with --group, then commits the positions reached as consumer group G (into __consumer_offsets);
 *   --from-committed (with --group): from G's committed offsets instead of the beginning (none: an error)
 * BrokerTool commit --bootstrap B --group G --topic T --offset P=O...
 *   sets group G's committed offset of partition P of T to O (the group has no active member)
 * </pre>
 */
public final class BrokerTool {
    private BrokerTool() {}

    /** What ends a command's output under {@code serve}, with its exit status after a space. */
    static final String END = "\u0000END";

    public static void main(String[] argv) throws Exception {
        if (argv.length == 0) {
            throw new IllegalArgumentException("usage: BrokerTool ready|create-topic|produce|consume|serve ...");
        }
        if (argv[0].equals("serve")) {
            serve();
            return;
        }
        run(argv, System.out);
        System.out.flush();
    }

    static void run(String[] argv, PrintStream out) throws Exception {
        Args args = new Args(argv);
        switch (argv[0]) {
            case "ready" -> ready(args);
            case "create-topic" -> createTopic(args);
            case "produce" -> produce(args, out);
            case "consume" -> consume(args, out);
            case "commit" -> commit(args);
            default -> throw new IllegalArgumentException("unknown command " + argv[0]);
        }
    }

    /**
     * One JVM for many commands (the tests' session saves a JVM start per command): each line of
     * standard input is a command with its arguments separated by tabs; its output follows on
     * standard output, then a line END and 0, or END and 1 after the error's lines.
     */
    static void serve() throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            int status = 0;
            try {
                run(line.split("\t", -1), out);
            } catch (Exception e) {
                StringWriter trace = new StringWriter();
                e.printStackTrace(new PrintWriter(trace));
                out.println(trace.toString().stripTrailing());
                status = 1;
            }
            out.println(END + " " + status);
            out.flush();
        }
    }

    /** --name value options; a repeated name keeps every value. */
    static final class Args {
        final Map<String, List<String>> values = new HashMap<>();

        Args(String[] argv) {
            for (int i = 1; i < argv.length; i++) {
                String name = argv[i];
                if (!name.startsWith("--")) {
                    throw new IllegalArgumentException("expected an option, got " + name);
                }
                String value = "true";
                if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) {
                    value = argv[++i];
                }
                values.computeIfAbsent(name.substring(2), k -> new ArrayList<>()).add(value);
            }
        }

        String get(String name, String fallback) {
            List<String> v = values.get(name);
            return v == null ? fallback : v.get(v.size() - 1);
        }

        String need(String name) {
            String v = get(name, null);
            if (v == null) {
                throw new IllegalArgumentException("--" + name + " is required");
            }
            return v;
        }

        int getInt(String name, int fallback) {
            return Integer.parseInt(get(name, Integer.toString(fallback)));
        }

        List<String> all(String name) {
            return values.getOrDefault(name, List.of());
        }
    }

    static Properties common(Args args) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args.need("bootstrap"));
        return p;
    }

    static void ready(Args args) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(args.getInt("timeout-ms", 120000));
        Properties p = common(args);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "2000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "3000");
        try (Admin admin = Admin.create(p)) {
            while (true) {
                try {
                    admin.describeCluster().nodes().get(3, TimeUnit.SECONDS);
                    admin.listTopics().names().get(3, TimeUnit.SECONDS);
                    return;
                } catch (Exception e) {
                    if (System.nanoTime() > deadline) {
                        throw new IllegalStateException("the broker at " + args.need("bootstrap") + " does not answer", e);
                    }
                    Thread.sleep(200);
                }
            }
        }
    }

    static void createTopic(Args args) throws InterruptedException, ExecutionException {
        Map<String, String> configs = new HashMap<>();
        for (String kv : args.all("config")) {
            int eq = kv.indexOf('=');
            configs.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        NewTopic topic = new NewTopic(args.need("topic"), args.getInt("partitions", 1), (short) 1).configs(configs);
        try (Admin admin = Admin.create(common(args))) {
            admin.createTopics(List.of(topic)).all().get();
        }
    }

    static KafkaProducer<byte[], byte[]> producer(Args args, String transactionalId, boolean idempotent) {
        Properties p = common(args);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, args.get("compression", "none"));
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, args.get("batch-size", "16384"));
        p.put(ProducerConfig.LINGER_MS_CONFIG, args.get("linger-ms", "5"));
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(idempotent));
        if (!idempotent) {
            p.put(ProducerConfig.ACKS_CONFIG, "1");
        }
        if (transactionalId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        return new KafkaProducer<>(p);
    }

    /** The record number i of a run: its key, value and headers follow from the options alone. */
    static final class RecordMaker {
        final String topic;
        final String tag;
        final int partitions;
        final int fixedPartition;
        final int valueBytes;
        final int headers;
        final int nullKeyEvery;
        final int nullValueEvery;
        final int keySpace;
        final Random random;

        RecordMaker(Args args, int partitions) {
            topic = args.need("topic");
            tag = args.get("tag", "r");
            this.partitions = partitions;
            fixedPartition = args.getInt("partition", -1);
            valueBytes = args.getInt("value-bytes", 0);
            headers = args.getInt("headers", 0);
            nullKeyEvery = args.getInt("null-key-every", 0);
            nullValueEvery = args.getInt("null-value-every", 0);
            keySpace = args.getInt("key-space", 0);
            random = new Random(Long.parseLong(args.get("seed", "1")));
        }

        ProducerRecord<byte[], byte[]> make(int i) {
            int partition = fixedPartition >= 0 ? fixedPartition : i % partitions;
            byte[] key = null;
            if (nullKeyEvery == 0 || i % nullKeyEvery != nullKeyEvery - 1) {
                int k = keySpace > 0 ? i % keySpace : i;
                key = ("key-" + tag + "-" + k).getBytes(StandardCharsets.UTF_8);
            }
            byte[] value = null;
            if (nullValueEvery == 0 || i % nullValueEvery != nullValueEvery - 1) {
                String text = "value-" + tag + "-" + i + "-";
                StringBuilder sb = new StringBuilder(text);
                // repetitive text with some noise: compressible, but not to nothing
                while (sb.length() < valueBytes) {
                    sb.append(random.nextInt(10) < 5 ? "abcdefgh" : Integer.toHexString(random.nextInt()));
                }
                value = sb.toString().getBytes(StandardCharsets.UTF_8);
            }
            ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, partition, null, key, value);
            for (int h = 0; h < headers; h++) {
                byte[] hv = h == 1 ? null : ("h" + h + "-" + i).getBytes(StandardCharsets.UTF_8);
                record.headers().add("hdr-" + h, hv);
            }
            return record;
        }
    }

    static int partitionCount(KafkaProducer<byte[], byte[]> producer, String topic) {
        List<PartitionInfo> infos = producer.partitionsFor(topic);
        return infos.size();
    }

    static void produce(Args args, PrintStream out) throws Exception {
        int count = args.getInt("count", 100);
        String txnId = args.get("transactional-id", null);
        int sent = 0;
        int aborted = 0;
        int transactions = 0;
        if (txnId == null) {
            try (KafkaProducer<byte[], byte[]> producer = producer(args, null, args.all("idempotent").size() > 0)) {
                RecordMaker maker = new RecordMaker(args, partitionCount(producer, args.need("topic")));
                List<Future<RecordMetadata>> acks = new ArrayList<>();
                for (int i = 0; i < count; i++) {
                    acks.add(producer.send(maker.make(i)));
                    sent++;
                }
                producer.flush();
                for (Future<RecordMetadata> ack : acks) {
                    ack.get(); // a record the broker refused fails the command
                }
            }
        } else {
            int nProducers = args.getInt("producers", 1);
            int txnRecords = args.getInt("txn-records", 10);
            int abortEvery = args.getInt("abort-every", 0);
            List<KafkaProducer<byte[], byte[]>> producers = new ArrayList<>();
            try {
                for (int p = 0; p < nProducers; p++) {
                    KafkaProducer<byte[], byte[]> producer = producer(args, txnId + "-" + p, true);
                    producer.initTransactions();
                    producers.add(producer);
                }
                RecordMaker maker = new RecordMaker(args, partitionCount(producers.get(0), args.need("topic")));
                int i = 0;
                while (i < count) {
                    // every producer opens a transaction and sends into it, in turn, record by
                    // record; then they end in order, some aborting
                    for (KafkaProducer<byte[], byte[]> producer : producers) {
                        producer.beginTransaction();
                    }
                    for (int r = 0; r < txnRecords; r++) {
                        for (KafkaProducer<byte[], byte[]> producer : producers) {
                            if (i < count) {
                                producer.send(maker.make(i++));
                                sent++;
                            }
                        }
                        if (r % 4 == 3) {
                            for (KafkaProducer<byte[], byte[]> producer : producers) {
                                producer.flush();
                            }
                        }
                    }
                    for (KafkaProducer<byte[], byte[]> producer : producers) {
                        transactions++;
                        if (abortEvery > 0 && transactions % abortEvery == 0) {
                            producer.abortTransaction();
                            aborted++;
                        } else {
                            producer.commitTransaction();
                        }
                    }
                }
            } finally {
                for (KafkaProducer<byte[], byte[]> producer : producers) {
                    producer.close(Duration.ofSeconds(30));
                }
            }
        }
        out.println("{\"sent\": " + sent + ", \"transactions\": " + transactions + ", \"aborted\": " + aborted + "}");
    }

    static void consume(Args args, PrintStream stdout) {
        Properties p = common(args);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, args.get("isolation", "read_uncommitted"));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
        String group = args.get("group", null);
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        boolean fromCommitted = group != null && args.get("from-committed", null) != null;
        if (fromCommitted) {
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        }
        String topic = args.need("topic");
        StringBuilder out = new StringBuilder();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic)) {
                tps.add(new TopicPartition(topic, info.partition()));
            }
            Collections.sort(tps, (a, b) -> Integer.compare(a.partition(), b.partition()));
            consumer.assign(tps);
            if (!fromCommitted) {
                consumer.seekToBeginning(tps);
            }
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (!done(consumer, tps, end)) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("consume: end offsets " + end + " not reached in 120 s");
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    if (r.offset() >= end.get(new TopicPartition(r.topic(), r.partition()))) {
                        continue;
                    }
                    out.append("{\"topic\": ").append(json(r.topic()));
                    out.append(", \"partition\": ").append(r.partition());
                    out.append(", \"offset\": ").append(r.offset());
                    out.append(", \"key\": ").append(b64(r.key()));
                    out.append(", \"value\": ").append(b64(r.value()));
                    out.append(", \"headers\": [");
                    boolean first = true;
                    for (Header h : r.headers()) {
                        out.append(first ? "" : ", ").append('[').append(json(h.key())).append(", ");
                        out.append(b64(h.value())).append(']');
                        first = false;
                    }
                    out.append("], \"timestamp\": ").append(r.timestamp());
                    out.append(", \"timestampType\": ").append(r.timestampType().id);
                    out.append("}\n");
                }
            }
            if (group != null) {
                consumer.commitSync();
            }
        }
        stdout.print(out);
    }

    static void commit(Args args) throws InterruptedException, ExecutionException {
        String topic = args.need("topic");
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (String po : args.all("offset")) {
            int eq = po.indexOf('=');
            offsets.put(new TopicPartition(topic, Integer.parseInt(po.substring(0, eq))),
                    new OffsetAndMetadata(Long.parseLong(po.substring(eq + 1))));
        }
        try (Admin admin = Admin.create(common(args))) {
            admin.alterConsumerGroupOffsets(args.need("group"), offsets).all().get();
        }
    }

    static boolean done(KafkaConsumer<byte[], byte[]> consumer, List<TopicPartition> tps, Map<TopicPartition, Long> end) {
        for (TopicPartition tp : tps) {
            if (consumer.position(tp) < end.get(tp)) {
                return false;
            }
        }
        return true;
    }

    static String b64(byte[] bytes) {
        return bytes == null ? "null" : "\"" + Base64.getEncoder().encodeToString(bytes) + "\"";
    }

    static String json(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
