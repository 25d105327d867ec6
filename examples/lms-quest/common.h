// Helpers of the LMS -> quest example programs: the shared example helpers
// (examples/common/example.h) and the LMS's dedup key.
#ifndef OUTBOX_EXAMPLES_LMS_QUEST_COMMON_H_
#define OUTBOX_EXAMPLES_LMS_QUEST_COMMON_H_

#include "../common/example.h"

namespace lms {

using namespace example;  // NOLINT: the example helpers, under the LMS's name

// The inbox stamp key and the LMS's dedup key: event kind + user + object, as in
// the seed (never the per-publish event id).
inline std::string CompletionKey(long user, long lesson) {
  return "LessonCompleted:" + std::to_string(user) + ":" + std::to_string(lesson);
}

}  // namespace lms

#endif  // OUTBOX_EXAMPLES_LMS_QUEST_COMMON_H_
