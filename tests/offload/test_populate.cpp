// populate() maps the whole pages of each region before a copy fills them, and leaves the
// partial pages at a region's ends and empty regions alone.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "offload/populate.hpp"

namespace spw::offload {
namespace {

std::vector<bool> resident(void* data, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((bytes + page - 1) / page);
  std::vector<bool> out;
  if (::mincore(data, bytes, in.data()) != 0) return out;
  for (unsigned char r : in) out.push_back((r & 1) != 0);
  return out;
}

TEST(Populate, MapsTheWholePagesOfEachRegionOnly) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t pages = 16;
  void* map = ::mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* base = static_cast<unsigned char*>(map);
  ASSERT_EQ(resident(base, pages * page), std::vector<bool>(pages, false));
  // Pages 1-3 whole; a region from the middle of page 6 to the middle of page 9 covers whole
  // pages 7 and 8 only; an empty region and one inside page 12 map nothing.
  populate({{base + page, 3 * page},
            {base + 6 * page + 100, 3 * page},
            {base + 11 * page, 0},
            {base + 12 * page + 8, page / 2}});
  std::vector<bool> want(pages, false);
  for (std::size_t p : {1, 2, 3, 7, 8}) want[p] = true;
  EXPECT_EQ(resident(base, pages * page), want);
  ::munmap(map, pages * page);
}

}  // namespace
}  // namespace spw::offload
