/* A key-value service over HTTP/1.0, one request at a time.
 *
 *   kv-server DATA_DIR ADDRESS_FILE NAME VERSION_FILE [PORT [ADDRESS]]
 *
 * GET /        "kv VERSION NAME pid PID"
 * GET /KEY     the value, or 404
 * PUT /KEY     stores the body as the value (keys are letters, digits, '-' and '_')
 *
 * Listens on ADDRESS (its VM's) and PORT, or any free port without one, and writes
 * "ADDRESS:PORT" to ADDRESS_FILE once it accepts connections. Where this machine has no
 * such address (a VM that shares the machine's network), or without one, it listens on
 * 127.0.0.1. Values are files in DATA_DIR. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char version[64] = "unknown";

static void reply(int fd, const char *status, const char *body, size_t length) {
  char head[256];
  int n = snprintf(head, sizeof head,
                   "HTTP/1.0 %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                   status, length);
  if (write(fd, head, n) < 0 || (length && write(fd, body, length) < 0)) {
    perror("write");
  }
}

static int valid_key(const char *key) {
  if (!*key || strlen(key) > 128) return 0;
  for (const char *c = key; *c; c++) {
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
          (*c >= '0' && *c <= '9') || *c == '-' || *c == '_'))
      return 0;
  }
  return 1;
}

static void serve(int fd, const char *data, const char *name) {
  static char request[65536];
  size_t have = 0;
  char *body = NULL;
  while (have < sizeof request - 1) {
    ssize_t n = read(fd, request + have, sizeof request - 1 - have);
    if (n <= 0) break;
    have += (size_t)n;
    request[have] = 0;
    body = strstr(request, "\r\n\r\n");
    if (body) {
      char *length = strcasestr(request, "Content-Length:");
      size_t want = length ? strtoul(length + 15, NULL, 10) : 0;
      if (have - (size_t)(body + 4 - request) >= want) break;
    }
  }
  char method[8], path[256];
  if (sscanf(request, "%7s %255s", method, path) != 2 || path[0] != '/') {
    reply(fd, "400 Bad Request", "bad request\n", 12);
    return;
  }
  const char *key = path + 1;
  char file[512], text[512];
  if (!*key && !strcmp(method, "GET")) {
    int n = snprintf(text, sizeof text, "kv %s %s pid %d\n", version, name, (int)getpid());
    reply(fd, "200 OK", text, (size_t)n);
    return;
  }
  if (!valid_key(key)) {
    reply(fd, "400 Bad Request", "bad key\n", 8);
    return;
  }
  snprintf(file, sizeof file, "%s/%s", data, key);
  if (!strcmp(method, "GET")) {
    FILE *f = fopen(file, "r");
    if (!f) {
      reply(fd, "404 Not Found", "not found\n", 10);
      return;
    }
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    reply(fd, "200 OK", text, n);
  } else if (!strcmp(method, "PUT") && body) {
    FILE *f = fopen(file, "w");
    if (!f) {
      reply(fd, "500 Internal Server Error", "cannot store\n", 13);
      return;
    }
    fputs(body + 4, f);
    fclose(f);
    reply(fd, "204 No Content", "", 0);
  } else {
    reply(fd, "405 Method Not Allowed", "GET or PUT\n", 11);
  }
}

static void stop(int signal_number) {
  (void)signal_number;
  _exit(0);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: kv-server DATA_DIR ADDRESS_FILE NAME VERSION_FILE [PORT [ADDRESS]]\n");
    return 2;
  }
  signal(SIGTERM, stop);
  signal(SIGPIPE, SIG_IGN);
  FILE *v = fopen(argv[4], "r");
  if (v) {
    if (fscanf(v, "%63s", version) != 1) strcpy(version, "unknown");
    fclose(v);
  }
  int server = socket(AF_INET, SOCK_STREAM, 0);
  int yes = 1;
  setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  struct sockaddr_in address = {0};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(argc > 5 ? (unsigned short)atoi(argv[5]) : 0);
  socklen_t size = sizeof address;
  int bound = -1;
  if (argc > 6 && inet_pton(AF_INET, argv[6], &address.sin_addr) == 1) {
    bound = bind(server, (struct sockaddr *)&address, size);
    if (bound && errno == EADDRNOTAVAIL) {
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
  }
  if (bound) bound = bind(server, (struct sockaddr *)&address, size);
  if (bound || listen(server, 16) ||
      getsockname(server, (struct sockaddr *)&address, &size)) {
    perror("kv-server: listen");
    return 1;
  }
  char host[INET_ADDRSTRLEN] = "127.0.0.1";
  inet_ntop(AF_INET, &address.sin_addr, host, sizeof host);
  FILE *a = fopen(argv[2], "w");
  if (!a) {
    perror("kv-server: address file");
    return 1;
  }
  fprintf(a, "%s:%d\n", host, ntohs(address.sin_port));
  fclose(a);
  printf("kv %s %s listening on %s:%d\n", version, argv[3], host, ntohs(address.sin_port));
  fflush(stdout);
  for (;;) {
    int client = accept(server, NULL, NULL);
    if (client < 0) {
      if (errno == EINTR) continue;
      perror("accept");
      return 1;
    }
    serve(client, argv[1], argv[3]);
    close(client);
  }
}
