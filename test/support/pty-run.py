"""Run a command under a real pseudo-terminal (its stdin, stdout and stderr).

usage: pty-run.py [--cols N] [--interrupt-on TEXT | --interrupt-twice-on TEXT] -- command args...

Everything the command writes to the terminal is copied to our stdout,
byte for byte. With --interrupt-on, once TEXT has appeared in that output,
Ctrl-C (0x03) is typed into the terminal, so the line discipline sends
SIGINT to the command's process group exactly as a user's keypress would
(--interrupt-twice-on: two Ctrl-C at once, a user pressing it again).
The exit status is the command's, or 128 + signal number if it was killed.
"""
import os, pty, struct, sys, fcntl, termios

args = sys.argv[1:]
cols = 80
trigger = None
twice = False
while args and args[0] != "--":
    if args[0] == "--cols":
        cols = int(args[1]); args = args[2:]
    elif args[0] == "--interrupt-on":
        trigger = args[1].encode(); args = args[2:]
    elif args[0] == "--interrupt-twice-on":
        trigger = args[1].encode(); twice = True; args = args[2:]
    else:
        sys.exit("pty-run.py: unknown option " + args[0])
command = args[1:]

pid, master = pty.fork()
if pid == 0:
    os.execvp(command[0], command)

fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
seen = b""
sent = False
while True:
    try:
        data = os.read(master, 65536)
    except OSError:
        break
    if not data:
        break
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    if trigger is not None and not sent:
        seen += data
        if trigger in seen:
            os.write(master, b"\x03\x03" if twice else b"\x03")
            sent = True
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
