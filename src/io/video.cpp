#include "io/video.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/dict.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "io/file.h"

namespace xdit::io {

namespace {

std::string av_error(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buf, sizeof(buf));
  return buf;
}

// FFmpeg's calls return < 0 on failure: one line naming what failed.
void check(int code, const char* what) {
  XDIT_CHECK(code >= 0, "video: ", what, " failed: ", av_error(code));
}

// FFmpeg's own log lines (x264's statistics) only for errors: xdit reports
// what went wrong itself.
void quiet_ffmpeg() {
  static const bool once = [] {
    av_log_set_level(AV_LOG_ERROR);
    return true;
  }();
  (void)once;
}

const AVCodec* find_h264() {
  quiet_ffmpeg();
  // XDIT_H264_ENCODER names the encoder (libopenh264, h264_vaapi, …); "none"
  // takes none, as a build without one (the fallback to PNG frames).
  if (const char* name = std::getenv("XDIT_H264_ENCODER"); name != nullptr && *name != '\0') {
    if (std::string(name) == "none") return nullptr;
    const AVCodec* c = avcodec_find_encoder_by_name(name);
    return c != nullptr && c->id == AV_CODEC_ID_H264 ? c : nullptr;
  }
  if (const AVCodec* c = avcodec_find_encoder_by_name("libx264")) return c;
  return avcodec_find_encoder(AV_CODEC_ID_H264);
}

// An in-memory, seekable output for the MP4 muxer (it rewrites the header's
// sizes at the end).
struct Memory {
  std::vector<uint8_t> bytes;
  int64_t pos = 0;
};

#if LIBAVFORMAT_VERSION_MAJOR >= 61
int write_packet(void* opaque, const uint8_t* buf, int size) {
#else
int write_packet(void* opaque, uint8_t* buf, int size) {
#endif
  auto* m = static_cast<Memory*>(opaque);
  const auto end = static_cast<size_t>(m->pos) + static_cast<size_t>(size);
  if (end > m->bytes.size()) m->bytes.resize(end);
  std::memcpy(m->bytes.data() + m->pos, buf, static_cast<size_t>(size));
  m->pos = static_cast<int64_t>(end);
  return size;
}

int64_t seek(void* opaque, int64_t offset, int whence) {
  auto* m = static_cast<Memory*>(opaque);
  const auto size = static_cast<int64_t>(m->bytes.size());
  if (whence == AVSEEK_SIZE) return size;
  const int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : size;
  if (base + offset < 0) return AVERROR(EINVAL);
  m->pos = base + offset;
  return m->pos;
}

struct Deleters {
  void operator()(AVFormatContext* c) const { avformat_free_context(c); }
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
  void operator()(AVFrame* f) const { av_frame_free(&f); }
  void operator()(AVPacket* p) const { av_packet_free(&p); }
  void operator()(SwsContext* s) const { sws_freeContext(s); }
  void operator()(AVIOContext* io) const {
    av_freep(&io->buffer);
    avio_context_free(&io);
  }
};
template <class T>
using Owned = std::unique_ptr<T, Deleters>;

}  // namespace

std::string h264_encoder() {
  const AVCodec* c = find_h264();
  return c != nullptr ? c->name : "";
}

std::vector<uint8_t> encode_mp4(const std::vector<std::vector<uint8_t>>& frames, int64_t width,
                                int64_t height, int fps,
                                const std::map<std::string, std::string>& metadata) {
  XDIT_CHECK(!frames.empty(), "video: no frames to write");
  XDIT_CHECK(width > 0 && height > 0 && width % 2 == 0 && height % 2 == 0 && width <= 16384 &&
                 height <= 16384,
             "video: H.264 in yuv420p needs even sides up to 16384, got ", width, "x", height);
  XDIT_CHECK(fps > 0 && fps <= 1000, "video: fps must be in 1 … 1000, got ", fps);
  const size_t frame_bytes = static_cast<size_t>(width * height * 3);
  for (const auto& f : frames)
    XDIT_CHECK(f.size() == frame_bytes, "video: a frame holds ", f.size(), " bytes, expected ",
               frame_bytes);
  const AVCodec* codec = find_h264();
  XDIT_CHECK(codec != nullptr, "video: this FFmpeg build has no H.264 encoder");

  // The output first: the muxer (destroyed before it) may still reach it.
  Memory mem;
  constexpr int kBuffer = 1 << 16;
  auto* buffer = static_cast<unsigned char*>(av_malloc(kBuffer));
  XDIT_CHECK(buffer != nullptr, "video: out of memory");
  Owned<AVIOContext> io(avio_alloc_context(buffer, kBuffer, 1, &mem, nullptr, write_packet, seek));
  if (io == nullptr) av_free(buffer);
  XDIT_CHECK(io != nullptr, "video: out of memory");
  AVFormatContext* raw = nullptr;
  check(avformat_alloc_output_context2(&raw, nullptr, "mp4", nullptr), "opening the MP4 muxer");
  Owned<AVFormatContext> oc(raw);
  io->seekable = AVIO_SEEKABLE_NORMAL;  // the muxer rewrites the header at the end
  oc->pb = io.get();
  oc->flags |= AVFMT_FLAG_CUSTOM_IO;

  AVStream* st = avformat_new_stream(oc.get(), nullptr);
  XDIT_CHECK(st != nullptr, "video: out of memory");
  Owned<AVCodecContext> cc(avcodec_alloc_context3(codec));
  XDIT_CHECK(cc != nullptr, "video: out of memory");
  cc->width = static_cast<int>(width);
  cc->height = static_cast<int>(height);
  cc->time_base = AVRational{1, fps};
  cc->framerate = AVRational{fps, 1};
  cc->pix_fmt = AV_PIX_FMT_YUV420P;
  cc->gop_size = std::max(1, fps);
  // No B-frames: every frame's decode time is its presentation time, so the
  // MP4 needs no edit list (with one, players and ffprobe dropped the first
  // frame of a 9-frame clip) and the stream's rate is the frame rate.
  cc->max_b_frames = 0;
  if (oc->oformat->flags & AVFMT_GLOBALHEADER) cc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if (std::strcmp(codec->name, "libx264") == 0) {
    av_opt_set(cc->priv_data, "preset", "medium", 0);
    av_opt_set(cc->priv_data, "crf", "18", 0);  // visually lossless
    av_opt_set(cc->priv_data, "x264-params", "bframes=0", 0);
  }
  check(avcodec_open2(cc.get(), codec, nullptr), "opening the H.264 encoder");
  check(avcodec_parameters_from_context(st->codecpar, cc.get()), "setting the stream");
  st->time_base = cc->time_base;
  for (const auto& [k, v] : metadata)
    if (!v.empty()) av_dict_set(&oc->metadata, k.c_str(), v.c_str(), 0);
  AVDictionary* opts = nullptr;
  av_dict_set(&opts, "movflags", "use_metadata_tags", 0);  // keep every key, not just MP4's own
  const int header = avformat_write_header(oc.get(), &opts);
  av_dict_free(&opts);
  check(header, "writing the MP4 header");

  Owned<SwsContext> sws(sws_getContext(
      cc->width, cc->height, AV_PIX_FMT_RGB24, cc->width, cc->height, AV_PIX_FMT_YUV420P,
      SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr));
  XDIT_CHECK(sws != nullptr, "video: no RGB → yuv420p conversion");
  Owned<AVFrame> frame(av_frame_alloc());
  Owned<AVPacket> pkt(av_packet_alloc());
  XDIT_CHECK(frame != nullptr && pkt != nullptr, "video: out of memory");
  frame->format = cc->pix_fmt;
  frame->width = cc->width;
  frame->height = cc->height;
  check(av_frame_get_buffer(frame.get(), 0), "allocating a frame");
  const auto drain = [&] {
    for (;;) {
      const int r = avcodec_receive_packet(cc.get(), pkt.get());
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
      check(r, "encoding a frame");
      // One frame long (the encoder leaves it 0, and an MP4 whose last sample
      // has no duration plays one frame short).
      if (pkt->duration <= 0) pkt->duration = 1;
      av_packet_rescale_ts(pkt.get(), cc->time_base, st->time_base);
      pkt->stream_index = st->index;
      check(av_interleaved_write_frame(oc.get(), pkt.get()), "writing a packet");
    }
  };
  for (size_t i = 0; i < frames.size(); ++i) {
    check(av_frame_make_writable(frame.get()), "preparing a frame");
    const uint8_t* src[1] = {frames[i].data()};
    const int stride[1] = {static_cast<int>(width * 3)};
    sws_scale(sws.get(), src, stride, 0, cc->height, frame->data, frame->linesize);
    frame->pts = static_cast<int64_t>(i);
    check(avcodec_send_frame(cc.get(), frame.get()), "encoding a frame");
    drain();
  }
  check(avcodec_send_frame(cc.get(), nullptr), "flushing the encoder");
  drain();
  check(av_write_trailer(oc.get()), "finishing the MP4");
  avio_flush(io.get());
  return std::move(mem.bytes);
}

void write_mp4(OutputFile& out, const std::vector<std::vector<uint8_t>>& frames, int64_t width,
               int64_t height, int fps, const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> bytes = encode_mp4(frames, width, height, fps, metadata);
  out.commit(bytes.data(), bytes.size());
}

VideoInfo read_video(const std::string& path, bool decode_frames) {
  quiet_ffmpeg();
  AVFormatContext* raw = nullptr;
  check(avformat_open_input(&raw, path.c_str(), nullptr, nullptr), ("opening " + path).c_str());
  std::unique_ptr<AVFormatContext, void (*)(AVFormatContext*)> ic(
      raw, [](AVFormatContext* c) { avformat_close_input(&c); });
  check(avformat_find_stream_info(ic.get(), nullptr), "reading the streams");
  const int vs = av_find_best_stream(ic.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  check(vs, "finding a video stream");
  const AVStream* st = ic->streams[vs];
  VideoInfo info;
  info.container = ic->iformat->name;
  info.codec = avcodec_get_name(st->codecpar->codec_id);
  const char* pf = av_get_pix_fmt_name(static_cast<AVPixelFormat>(st->codecpar->format));
  info.pixel_format = pf != nullptr ? pf : "";
  info.width = st->codecpar->width;
  info.height = st->codecpar->height;
  info.fps = av_q2d(st->avg_frame_rate);
  const AVDictionaryEntry* e = nullptr;
  while ((e = av_dict_get(ic->metadata, "", e, AV_DICT_IGNORE_SUFFIX)) != nullptr)
    info.metadata[e->key] = e->value;

  Owned<AVCodecContext> dc;
  Owned<SwsContext> sws;
  Owned<AVFrame> frame(av_frame_alloc());
  Owned<AVPacket> pkt(av_packet_alloc());
  XDIT_CHECK(frame != nullptr && pkt != nullptr, "video: out of memory");
  if (decode_frames) {
    const AVCodec* codec = avcodec_find_decoder(st->codecpar->codec_id);
    XDIT_CHECK(codec != nullptr, "video: no decoder for ", info.codec);
    dc.reset(avcodec_alloc_context3(codec));
    XDIT_CHECK(dc != nullptr, "video: out of memory");
    check(avcodec_parameters_to_context(dc.get(), st->codecpar), "setting the decoder");
    check(avcodec_open2(dc.get(), codec, nullptr), "opening the decoder");
  }
  const auto receive = [&] {
    for (;;) {
      const int r = avcodec_receive_frame(dc.get(), frame.get());
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
      check(r, "decoding a frame");
      if (!sws)
        sws.reset(sws_getContext(
            frame->width, frame->height, static_cast<AVPixelFormat>(frame->format), frame->width,
            frame->height, AV_PIX_FMT_RGB24, SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT,
            nullptr, nullptr, nullptr));
      XDIT_CHECK(sws != nullptr, "video: no conversion of the decoded frames to RGB");
      std::vector<uint8_t> rgb(static_cast<size_t>(frame->width * frame->height * 3));
      uint8_t* dst[1] = {rgb.data()};
      const int stride[1] = {frame->width * 3};
      sws_scale(sws.get(), frame->data, frame->linesize, 0, frame->height, dst, stride);
      info.rgb.push_back(std::move(rgb));
    }
  };
  while (av_read_frame(ic.get(), pkt.get()) >= 0) {
    if (pkt->stream_index == vs) {
      ++info.frames;
      if (decode_frames) {
        check(avcodec_send_packet(dc.get(), pkt.get()), "decoding a packet");
        receive();
      }
    }
    av_packet_unref(pkt.get());
  }
  if (decode_frames) {
    check(avcodec_send_packet(dc.get(), nullptr), "flushing the decoder");
    receive();
  }
  return info;
}

}  // namespace xdit::io
