package procfs

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The test process reads as itself: its parent, its memory, its command
// line; a child it starts is among its children until it is reaped, and
// a pid that is not there reads as gone.
func TestReadSelf(t *testing.T) {
	st, ok := ReadStat(os.Getpid())
	if !ok || st.PPID != os.Getppid() || st.PGRP != syscall.Getpgrp() || st.RSS <= 0 || st.Zombie {
		t.Fatalf("ReadStat(self) = %+v, %v", st, ok)
	}
	if !Alive(os.Getpid()) {
		t.Error("self not alive")
	}
	if rss := StatusBytes(os.Getpid(), "VmRSS:"); rss <= 0 {
		t.Errorf("VmRSS %d", rss)
	}
	if cl := File(os.Getpid(), "cmdline"); !strings.Contains(string(cl), os.Args[0]) {
		t.Errorf("cmdline %q lacks %q", cl, os.Args[0])
	}
	if GroupCPU(os.Getpid()) < st.CPU {
		t.Error("group CPU below own CPU")
	}

	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !slices.Contains(ChildrenOf(os.Getpid()), pid) || !Alive(pid) {
		t.Errorf("child %d not found alive", pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if Alive(pid) {
		t.Errorf("reaped child %d still alive", pid)
	}
	if _, ok := ReadStat(-1); ok || StatusBytes(pid, "VmRSS:") != 0 || File(pid, "cmdline") != nil {
		t.Error("a process that is gone reads as there")
	}
}
