// The router's image encoder balancer: only the registry's encoders of its model, the fewest
// outstanding image tokens first (the larger of its own count and the encoder's reported queue),
// ties spread, failed encoders skipped until a newer heartbeat, and its metrics.
#include "server/encoder_selector.h"

#include <gtest/gtest.h>

#include <string>

namespace deepinfer::server {
namespace {

WorkerRecord encoder(uint16_t port, int64_t heartbeat = 1, int64_t queued_tokens = 0) {
  WorkerRecord record;
  record.host = "127.0.0.1";
  record.port = port;
  record.id = "127.0.0.1:" + std::to_string(port);
  record.role = "encoder";
  record.model = "vl";
  record.heartbeat = heartbeat;
  record.load.queued_tokens = queued_tokens;
  return record;
}

TEST(EncoderSelector, TakesOnlyEncodersOfItsModel) {
  EncoderSelector s("vl");
  EXPECT_FALSE(s.acquire(10).has_value());
  WorkerRecord worker = encoder(1);
  worker.role = "both";
  WorkerRecord other = encoder(2);
  other.model = "other";
  const std::vector<std::string> log = s.update({worker, other, encoder(3)});
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("image encoder 127.0.0.1:3 joined"), std::string::npos) << log[0];
  EXPECT_EQ(s.num_live(), 1u);
  const auto lease = s.acquire(10);
  ASSERT_TRUE(lease.has_value());
  EXPECT_EQ(lease->port, 3);
  s.release(*lease);
  const std::vector<std::string> gone = s.update({});
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_NE(gone[0].find("127.0.0.1:3 left the registry"), std::string::npos) << gone[0];
  EXPECT_FALSE(s.acquire(10).has_value());
}

TEST(EncoderSelector, FewestOutstandingImageTokensFirst) {
  EncoderSelector s("vl");
  s.update({encoder(1), encoder(2), encoder(3, 1, 500)});
  // Idle encoders take turns (ties go to the one sent the fewest requests); 3 reports a queue.
  const auto a = s.acquire(100);
  const auto b = s.acquire(100);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->port, 1);
  EXPECT_EQ(b->port, 2);
  s.release(*a);
  const auto c = s.acquire(1000);  // 1 is idle again
  ASSERT_TRUE(c);
  EXPECT_EQ(c->port, 1);
  const auto d = s.acquire(10);  // 2 has 100 outstanding, 3 reports 500, 1 has 1000
  ASSERT_TRUE(d);
  EXPECT_EQ(d->port, 2);
  const auto e = s.acquire(10, {"127.0.0.1:2"});  // excluded: the next least loaded
  ASSERT_TRUE(e);
  EXPECT_EQ(e->port, 3);
  std::string metrics;
  s.render_metrics(metrics);
  EXPECT_NE(metrics.find("deepinfer_router_encoders{state=\"live\"} 3"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("deepinfer_encoder_outstanding_tokens{worker=\"127.0.0.1:2\"} 110"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("deepinfer_encoder_reported_queued_tokens{worker=\"127.0.0.1:3\"} 500"), std::string::npos)
      << metrics;
  for (const auto& lease : {b, c, d, e}) s.release(*lease);
  s.render_metrics(metrics = "");
  EXPECT_NE(metrics.find("deepinfer_encoder_outstanding_tokens{worker=\"127.0.0.1:2\"} 0"), std::string::npos);
}

TEST(EncoderSelector, FailedEncodersWaitForANewerHeartbeat) {
  EncoderSelector s("vl");
  s.update({encoder(1), encoder(2)});
  s.mark_failed("127.0.0.1:1");
  EXPECT_EQ(s.num_live(), 1u);
  for (int i = 0; i < 3; ++i) {
    const auto lease = s.acquire(10);
    ASSERT_TRUE(lease);
    EXPECT_EQ(lease->port, 2);
    s.release(*lease);
  }
  s.mark_failed("127.0.0.1:2");
  EXPECT_FALSE(s.acquire(10).has_value());
  EXPECT_TRUE(s.update({encoder(1), encoder(2)}).empty());  // the same heartbeat: still failed
  const std::vector<std::string> log = s.update({encoder(1, 2), encoder(2)});
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("127.0.0.1:1 is alive again"), std::string::npos) << log[0];
  const auto lease = s.acquire(10);
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->port, 1);
  s.count_fallback();
  std::string metrics;
  s.render_metrics(metrics);
  EXPECT_NE(metrics.find("deepinfer_encoder_failures_total{worker=\"127.0.0.1:2\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("deepinfer_router_image_fallbacks_total 1"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::server
