// Model references as users type them: a folder path, or a Hugging Face repo
// id ORG/NAME[@REVISION] resolved offline through the local Hugging Face
// cache (the layout huggingface_hub writes: models--ORG--NAME/refs/<rev>
// holding a commit hash, snapshots/<hash>/ holding the files as symlinks to
// blobs/). xdit never downloads anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xdit::io {

struct ModelRef {
  std::string folder;    // the folder to read
  std::string id;        // ORG/NAME when resolved through the cache, else empty
  std::string revision;  // as asked ("main", a tag, or a hash); empty for a folder
  std::string commit;    // the snapshot's hash; empty for a folder
  bool from_cache() const { return !id.empty(); }
  // "PixArt-alpha/PixArt-XL-2-1024-MS@main (snapshot 1a2b3c…)" or the folder.
  std::string describe() const;
};

// The cache: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub.
std::string hf_hub_cache();

// An existing folder always wins; otherwise `ref` must be a repo id in the
// cache. Throws one line: for a reference that is neither (with the cache
// path looked in and the download command), a `..` or absolute path inside
// an id, a refs file naming a missing snapshot, or a snapshot whose
// symlinks point to missing blobs (naming the first such file).
ModelRef resolve_model(const std::string& ref);

// A snapshot in the cache with a diffusers model_index.json.
struct CachedModel {
  std::string id, commit, folder, pipeline_class;
  std::vector<std::string> refs;  // the refs naming this snapshot ("main", ...)
  uint64_t bytes = 0;             // its files on disk (each blob counted once)
};
// Every diffusers pipeline snapshot in the cache, by id then commit.
std::vector<CachedModel> list_cached_models();

}  // namespace xdit::io
