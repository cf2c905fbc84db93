throw 'update the Intel graphics driver through the fleet channel'
