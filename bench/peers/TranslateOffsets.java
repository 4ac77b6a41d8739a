/*
 * MirrorMaker 2's own offset translation, run against a target cluster:
 *
 *   java -cp <kafka4 jars>:<classes> TranslateOffsets TARGET_BOOTSTRAP SOURCE_ALIAS GROUP [TIMEOUT_MS]
 *
 * RemoteClusterUtils.translateOffsets reads `<SOURCE_ALIAS>.checkpoints.internal` on the target
 * (MM2's default replication policy) and returns the group's offsets in the remote topics, which
 * are printed one JSON object a line: {"topic":"east.orders","partition":0,"offset":42}. The
 * interop tests check what `causeway mirror` writes with it (bench/peers/java.py compiles it once).
 */
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public final class TranslateOffsets {
    public static void main(String[] args) throws Exception {
        if (args.length < 3 || args.length > 4) {
            System.err.println("usage: TranslateOffsets TARGET_BOOTSTRAP SOURCE_ALIAS GROUP [TIMEOUT_MS]");
            System.exit(2);
        }
        Map<String, Object> properties = new HashMap<>();
        properties.put("bootstrap.servers", args[0]);
        Duration timeout = Duration.ofMillis(args.length == 4 ? Long.parseLong(args[3]) : 30_000L);
        Map<TopicPartition, OffsetAndMetadata> offsets =
            RemoteClusterUtils.translateOffsets(properties, args[1], args[2], timeout);
        for (Map.Entry<TopicPartition, OffsetAndMetadata> entry : offsets.entrySet()) {
            TopicPartition tp = entry.getKey();
            System.out.printf("{\"topic\":\"%s\",\"partition\":%d,\"offset\":%d}%n",
                              tp.topic(), tp.partition(), entry.getValue().offset());
        }
    }
}
