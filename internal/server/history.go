package server

import "path/filepath"

// historyFile is where the dashboard's history of counts per minute is
// kept across restarts (insight.HistoryOptions.Path): beside the Pebble
// store in --data-dir, or in --data-dir on DynamoDB (each node keeps what
// it decided, as for the seconds); none with --store memory, whose
// history lives as long as the process, like its counters.
func (s *Server) historyFile() string {
	if s.c.Store == "memory" || s.c.DataDir == "" {
		return ""
	}
	return filepath.Join(s.c.DataDir, "insight-history")
}

// historyWritten logs the history's writes failing, and working again.
func (s *Server) historyWritten(err error) {
	if err != nil {
		s.log.Warn("writing the dashboard's history failed: it is kept in memory until a write succeeds", "err", err)
		return
	}
	s.log.Info("writing the dashboard's history works again")
}
