// Output files: how the task shim's copier (task_shim.h) opens a job's output and error
// files (api/output_pattern.h) and empties them once per attempt.
//
// Every task of a job's first attempt in "truncate" mode asks to empty the files it opens,
// and many of them may share one file: the ranks of a node, or, on a shared filesystem, the
// ranks of every node. Exactly one of them must empty it, and no task may write before that
// has happened, or the emptying cuts another task's first lines. So no task opens with
// O_TRUNC: each opens for appending, takes flock(LOCK_EX) on the file, reads the marker of
// the attempt that last emptied it, and empties it (and sets the marker) only when the
// marker is not its own attempt's; then it unlocks and writes, with O_APPEND. Whoever of
// the attempt comes first empties the file; every later opener of the attempt finds the
// marker and keeps what is there. A requeue or restart appends without truncating (the
// caller asks for no truncation), as Slurm does.
//
// The marker is the user extended attribute `user.cohort.truncated` of the file (kept by
// ext4, xfs, btrfs, tmpfs since Linux 6.6, NFS 4.2, Lustre, CephFS, GPFS). On a filesystem
// that keeps no user attributes (ENOTSUP: NFSv3, tmpfs before 6.6), it is a file next to
// the output, `.NAME.cohort-truncated`, made by the same account. When neither can be
// written, the file is kept as it was (appended to, never emptied), and the returned note
// says so: keeping lines is better than cutting the attempt's own.
//
// Only a regular file is emptied; a FIFO, terminal or /dev/null is opened and written as is.
// Pure system calls, no state; any thread (the copier is a forked child of the shim).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace cohort::agent {

// The extended attribute that names the attempt that last emptied an output file.
inline constexpr char kTruncatedXattr[] = "user.cohort.truncated";

// Opens `path` as a shell's `>>` would: created 0666 less the umask, written at its end
// (O_APPEND, so tasks that share it never overwrite each other's lines), with the
// permissions of the calling account. O_NONBLOCK only for the open: a FIFO nobody reads
// fails (ENXIO) rather than hanging the task's start. A symbolic link as the file's name
// is followed only when the calling account or root owns it (a chain of them, each so):
// one that another user planted in a directory they may write (a team's shared logs
// directory) would otherwise make the job write, or empty, any file of the job's user the
// link names (Linux's fs.protected_symlinks guards only sticky world-writable
// directories). The link is read from the inode whose owner was checked, so swapping it
// meanwhile gains nothing; links among the directories above the name are followed as
// usual. Returns the descriptor (close-on-exec), or -1 with errno set: kForeignLinkErr for
// a link refused.
int OpenOutputFile(const std::string& path);

// The errno OpenOutputFile sets for a symbolic link it does not follow (not a system one).
inline constexpr int kForeignLinkErr = 0x10000;
// strerror(err), or for kForeignLinkErr what was refused and what to do.
std::string OutputOpenError(int err);

// The sidecar that marks `path` emptied where its filesystem keeps no user attributes:
// ".NAME.cohort-truncated" in the file's directory.
std::string TruncationSidecarPath(const std::string& path);

// Empties the file open on `fd` (opened by OpenOutputFile from `path`) unless the attempt
// `attempt` names (api::OutputTruncationMarker) has already emptied it, under flock, as
// above. `use_xattr` false goes straight to the sidecar (for tests of that fallback). The
// lock is waited for at most `lock_wait` (tasks hold it for a few system calls; a longer
// holder is someone else's, and the task must start): then the marker is checked and set
// without it. Returns "" when done, else one line for the task's log saying what could
// not be done and what became of the file.
inline constexpr std::chrono::milliseconds kOutputLockWait{10'000};
std::string TruncateOncePerAttempt(int fd, const std::string& path, std::string_view attempt,
                                   bool use_xattr = true, std::chrono::milliseconds lock_wait = kOutputLockWait);

}  // namespace cohort::agent
