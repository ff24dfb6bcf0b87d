/* kbox fork's channel to a running sandbox (docs/snapshots.md, "Fork"):
 * the sandbox's kbox listens on fork.sock in its runtime folder (0700,
 * the user's own); kbox fork connects, sends the layout key of the copy
 * it will start and the descriptor of an empty private file, and the
 * sandbox pauses, saves itself into that file, resumes and answers.
 * One request per connection, SOCK_SEQPACKET: each message whole.  The
 * answer comes from a process that runs a guest, so its reader checks
 * every byte (the file itself is checked by the snapshot loader). */
#ifndef KBOX_VMM_SANDBOX_FORKCTL_H
#define KBOX_VMM_SANDBOX_FORKCTL_H

#include <stddef.h>
#include <stdint.h>

#define FORKCTL_KEY_LEN 32
#define FORKCTL_MSG_MAX 400

/* What the sandbox answers: 0 or a negative errno, and a line when it
 * refused; the figures of the save (the guest's pause, the state
 * without RAM, the file). */
struct forkctl_answer {
	int status;
	double pause_ms, state_ms;
	uint64_t file_bytes;
	char msg[FORKCTL_MSG_MAX + 1];
};

/* <dir>/fork.sock, bound and listening (made before the lock-down): the
 * fd, or a negative errno with a line in err. */
int forkctl_listen(const char *dir, char *err, size_t errlen);

/* The next request on lfd: the connection (answer it with
 * forkctl_answer), the key asked for and the file's descriptor (the
 * caller's to close).  A connection with a malformed request (its size,
 * magic, not exactly one descriptor) is answered -EPROTO and closed, and
 * the next one waited for.  A negative errno when lfd fails. */
int forkctl_accept(int lfd, uint8_t key[FORKCTL_KEY_LEN], int *file_fd);

/* Answer on cfd and close it. */
void forkctl_reply(int cfd, const struct forkctl_answer *a);

/* Ask the sandbox whose runtime folder is dir to save itself into
 * file_fd for a copy of layout key; wait up to timeout_ms for its
 * answer, checked into *a.  0 when the request was answered (a->status
 * says how), or a negative errno with a line in err (no sandbox
 * listening, no answer in time, a malformed answer). */
int forkctl_request(const char *dir, const uint8_t key[FORKCTL_KEY_LEN], int file_fd, int timeout_ms,
		    struct forkctl_answer *a, char *err, size_t errlen);

#endif
